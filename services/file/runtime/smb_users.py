"""SMB users: a Unix account (no home, no shell) plus a Samba password in our passdb."""

from __future__ import annotations

import pwd
import subprocess

from .errors import CommandError
from .process import require_binary
from .specs import check_user_name


def _run(argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, input=stdin, check=False, capture_output=True, text=True,
                          timeout=60)
    if done.returncode != 0:
        raise CommandError(f"{' '.join(argv[:2])}... failed (exit {done.returncode}): "
                           f"{(done.stderr or done.stdout).strip()}")
    return done


def unix_user_exists(name: str) -> bool:
    """True if a Unix account called ``name`` exists."""
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def ensure_unix_user(name: str) -> bool:
    """Create a system account ``name`` without home or login shell; True if it was created."""
    check_user_name(name)
    if unix_user_exists(name):
        return False
    _run([require_binary("useradd"), "--system", "--no-create-home",
          "--shell", "/usr/sbin/nologin", name])
    return True


def delete_unix_user(name: str) -> None:
    """Remove the Unix account ``name`` if it exists."""
    check_user_name(name)
    if unix_user_exists(name):
        _run([require_binary("userdel"), name])


def set_smb_password(conf_path: str, name: str, password: str) -> None:
    """Add ``name`` to the passdb of the smb.conf at ``conf_path`` (or change its password).

    The Unix account must exist first (:func:`ensure_unix_user`).
    """
    check_user_name(name)
    if not password or "\n" in password:
        raise CommandError("an SMB password must be non-empty and on one line")
    if not unix_user_exists(name):
        raise CommandError(f"Unix account {name!r} does not exist; call ensure_unix_user first")
    _run([require_binary("smbpasswd"), "-c", conf_path, "-a", "-s", name],
         stdin=f"{password}\n{password}\n")


def delete_smb_user(conf_path: str, name: str, remove_unix_user: bool = True) -> None:
    """Remove ``name`` from the passdb (if present) and, by default, its Unix account."""
    check_user_name(name)
    done = subprocess.run([require_binary("pdbedit"), "-s", conf_path, "-L"],
                          check=False, capture_output=True, text=True, timeout=60)
    if any(line.split(":", 1)[0] == name for line in done.stdout.splitlines()):
        _run([require_binary("smbpasswd"), "-c", conf_path, "-x", name])
    if remove_unix_user:
        delete_unix_user(name)
