"""ansible/ passes ansible-lint (its production profile, offline) and Ansible's own syntax
check of every playbook."""
import subprocess
import sys
from pathlib import Path

ANSIBLE = Path(__file__).resolve().parent.parent / "ansible"
BIN = Path(sys.executable).parent


def test_ansible_lint_passes():
    proc = subprocess.run([str(BIN / "ansible-lint"), "--offline", "--nocolor", "--profile",
                           "production"], cwd=ANSIBLE, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


def test_playbooks_pass_the_syntax_check():
    for playbook in ("site.yml", "remove-node.yml"):
        proc = subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", "-i",
                               "inventory.example.ini", playbook, "-e", "node=node1"],
                              cwd=ANSIBLE, capture_output=True, text=True, timeout=300,
                              env={"PATH": f"{BIN}:/usr/bin:/bin",
                                   "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg")})
        assert proc.returncode == 0, f"{playbook}: {proc.stdout}{proc.stderr}"
