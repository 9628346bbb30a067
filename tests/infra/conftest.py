"""The infra suite runs against a deployed cluster through its Ansible inventory:
JETRAFT_INVENTORY (default inventories/lab/hosts.yml, written by ``python -m lab up``).
Drills (destructive) are marked ``drill``; their ledgers go to JETRAFT_LAB_RUN
(default lab/artifacts/<time>/)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# testinfra's Ansible backend runs ansible-inventory and ansible from PATH: use this venv's.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
os.environ.setdefault("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))

INVENTORY = Path(os.environ.get("JETRAFT_INVENTORY", ROOT / "inventories" / "lab" / "hosts.yml"))


def pytest_collection_modifyitems(config, items):
    if not INVENTORY.exists():
        skip = pytest.mark.skip(reason=f"no inventory at {INVENTORY}: bring the lab up "
                                       "(python -m lab up) and apply site.yml first")
        for item in items:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def run_dir() -> Path:
    path = Path(os.environ.get("JETRAFT_LAB_RUN", ROOT / "lab" / "artifacts" / time.strftime("%Y%m%d-%H%M%S")))
    path.mkdir(parents=True, exist_ok=True)
    return path
