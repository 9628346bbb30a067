"""ansible-lint with the production profile passes on site.yml, the playbooks and the roles."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from playbook import ROOT

ANSIBLE_LINT = Path(sys.executable).with_name("ansible-lint")


@pytest.mark.timeout(300)
def test_ansible_lint_production_profile_passes():
    if not ANSIBLE_LINT.exists():
        pytest.fail("ansible-lint is not installed: make setup installs it (the lab extra)")
    result = subprocess.run(
        [str(ANSIBLE_LINT), "--offline", "--profile", "production", "--nocolor", "-f", "pep8",
         "site.yml", "playbooks", "roles"],
        cwd=ROOT, capture_output=True, text=True, timeout=280,
        env={"PATH": f"{ANSIBLE_LINT.parent}:/usr/bin:/bin", "HOME": str(Path.home()),
             "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")})
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert "Profile 'production' was required, and it passed" in out, out[-2000:]
