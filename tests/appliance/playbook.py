"""Run one of the project's playbooks the way an operator does, for the appliance tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")


def run_playbook(name: str, inventory: Path, *tags: str, env: dict[str, str] | None = None,
                 drop_env_prefix: str | None = None) -> subprocess.CompletedProcess:
    """``ansible-playbook -i inventory playbooks/<name>.yml [--tags ...]`` from the project
    root with its ansible.cfg; ``env`` adds variables, ``drop_env_prefix`` removes those
    starting with it. Output is text, colourless."""
    base = {k: v for k, v in os.environ.items()
            if not (drop_env_prefix and k.startswith(drop_env_prefix))}
    base.update(ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                ANSIBLE_FORCE_COLOR="0", **(env or {}))
    cmd = [str(ANSIBLE_PLAYBOOK), "-i", str(inventory), str(ROOT / "playbooks" / f"{name}.yml")]
    if tags:
        cmd += ["--tags", ",".join(tags)]
    return subprocess.run(cmd, cwd=ROOT, env=base, capture_output=True, text=True, timeout=600)


def run_lab(state_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -m lab ARGS`` from the project root with its state in ``state_dir`` (a lab of
    the test's own, never the machine's), 200 columns wide."""
    env = {**os.environ, "JETRAFT_LAB_STATE": str(state_dir), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "lab", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def flat(result: subprocess.CompletedProcess) -> str:
    """stdout and stderr with all whitespace runs made single spaces (messages wrap)."""
    return " ".join((result.stdout + result.stderr).split())


def local_inventory(path: Path, *, hosts: dict | None = None, children: dict | None = None,
                    **group_vars) -> Path:
    """Write an inventory whose group ``jetraft`` holds ``hosts`` and/or ``children`` (zone
    groups), every host reached with ``ansible_connection: local`` and this interpreter;
    ``group_vars`` are the group's vars. Returns ``path``."""
    group: dict = {"vars": {"ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable, **group_vars}}
    if hosts is not None:
        group["hosts"] = hosts
    if children is not None:
        group["children"] = children
    path.write_text(yaml.safe_dump({"jetraft": group}))
    return path
