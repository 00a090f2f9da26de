"""Samba (smbd) config: built as a plain dict (unit-testable), then printed by the renderer.

Dict shape: ``{"global": {param: value}, "shares": {share name: {param: value}}}``; values
are strings, ints, bools (printed yes/no) or lists (printed space-separated). Also writes
nothing itself: the per-share ``dfree`` scripts are returned by :func:`dfree_scripts`.
"""

from __future__ import annotations

import os
import shlex

from .errors import InvalidShareSpec
from .specs import SmbSettings, SmbShare, check_text

STATE_SUBDIRS = ("private", "lock", "state", "cache", "pid", "ncalrpc", "binddns")


def smb_conf_path(settings: SmbSettings) -> str:
    """Where the supervisor installs smb.conf for ``settings``."""
    return os.path.join(settings.state_dir, "smb.conf")


def dfree_script_path(settings: SmbSettings, share: SmbShare) -> str:
    """Path of the script that reports ``share``'s quota as its size."""
    return os.path.join(settings.state_dir, "dfree", share.name)


def build_smb_config(settings: SmbSettings, shares: list[SmbShare]) -> dict:
    """Return the smb.conf for ``settings`` and ``shares`` as a plain dict.

    A standalone server on ``settings.port`` bound to ``settings.interfaces`` only, with no
    NetBIOS, printers or guest mapping, and every state directory under
    ``settings.state_dir``. Shares get ``shadow_copy2`` over ``<path>/<snapshot_dir>`` (the
    snapshot names must match ``settings.snapshot_format``), ``smb encrypt = required`` when
    ``encrypt`` is set, and a ``dfree command`` reporting ``quota_bytes`` as the share size.
    Raises :class:`InvalidShareSpec` for duplicate share names (case-insensitive, like SMB).
    """
    state = settings.state_dir
    for iface in settings.interfaces:
        check_text("interface", iface)
    glob = {
        "server role": "standalone server",
        "workgroup": check_text("workgroup", settings.workgroup),
        "netbios name": check_text("netbios name", settings.netbios_name),
        "smb ports": settings.port,
        "interfaces": list(settings.interfaces),
        "bind interfaces only": True,
        "disable netbios": True,
        "server min protocol": "SMB3",
        "server smb encrypt": settings.server_encrypt,
        "server signing": "mandatory" if any(s.signing for s in shares) else "default",
        "private dir": os.path.join(state, "private"),
        "lock directory": os.path.join(state, "lock"),
        "state directory": os.path.join(state, "state"),
        "cache directory": os.path.join(state, "cache"),
        "pid directory": os.path.join(state, "pid"),
        "ncalrpc dir": os.path.join(state, "ncalrpc"),
        "binddns dir": os.path.join(state, "binddns"),
        "passdb backend": f"tdbsam:{os.path.join(state, 'private', 'passdb.tdb')}",
        "log file": os.path.join(state, "log.%m"),
        "map to guest": "never",
        "load printers": False,
        "printing": "bsd",
        "printcap name": "/dev/null",
        "disable spoolss": True,
        "unix extensions": False,
        "dfree cache time": settings.dfree_cache_seconds,
    }
    sections: dict[str, dict] = {}
    for share in shares:
        if share.name.lower() in {name.lower() for name in sections}:
            raise InvalidShareSpec(f"share name {share.name!r} is used twice")
        sections[share.name] = _share_section(settings, share)
    return {"global": glob, "shares": sections}


def _share_section(settings: SmbSettings, share: SmbShare) -> dict:
    section: dict = {
        "path": share.path,
        "read only": share.read_only,
        "browseable": True,
    }
    if share.comment:
        section["comment"] = share.comment
    if share.valid_users:
        section["valid users"] = list(share.valid_users)
    if share.encrypt:
        section["smb encrypt"] = "required"
    if share.snapshots:
        section.update({
            "vfs objects": ["shadow_copy2"],
            "shadow:mountpoint": share.path,
            "shadow:snapdir": settings.snapshot_dir,
            "shadow:format": settings.snapshot_format,
            "shadow:localtime": settings.snapshot_localtime,
            "shadow:sort": "desc",
        })
    if share.quota_bytes is not None:
        section["dfree command"] = dfree_script_path(settings, share)
    return section


def dfree_scripts(settings: SmbSettings, shares: list[SmbShare]) -> dict[str, str]:
    """Return ``{script path: text}`` for every share with a quota.

    Samba runs the script as the connected user with the queried directory as its only
    argument and expects ``<total> <free> <block size>``. The total is the quota; the used
    part is counted with ``du -x`` on the share path (btrfs snapshots are separate
    subvolumes, so ``-x`` leaves them out).
    """
    scripts = {}
    for share in shares:
        if share.quota_bytes is None:
            continue
        total_kib = share.quota_bytes // 1024
        scripts[dfree_script_path(settings, share)] = (
            "#!/bin/sh\n"
            "# Generated by Strata: reports the share's quota as its size.\n"
            f"used=$(du -skx {shlex.quote(share.path)} 2>/dev/null | cut -f1)\n"
            f"total={total_kib}\n"
            "free=$((total - ${used:-0}))\n"
            "[ \"$free\" -lt 0 ] && free=0\n"
            "echo \"$total $free 1024\"\n"
        )
    return scripts


def render_smb_conf(config: dict) -> str:
    """Print a dict from :func:`build_smb_config` in smb.conf syntax."""
    lines = ["# Generated by Strata (services.file.runtime.samba); do not edit.", "[global]"]
    lines += [f"    {key} = {_value(key, value)}" for key, value in config["global"].items()]
    for name, section in config["shares"].items():
        lines += ["", f"[{name}]"]
        lines += [f"    {key} = {_value(key, value)}" for key, value in section.items()]
    return "\n".join(lines) + "\n"


def _value(key: str, value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return " ".join(_value(key, v) for v in value)
    text = check_text(key, str(value))
    if text != text.strip():
        raise InvalidShareSpec(f"{key} {text!r} has leading or trailing spaces")
    return text
