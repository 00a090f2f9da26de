"""keepalived for the cluster's floating data addresses (no Django here).

A node may own a floating data address (``Node.floating_address``, e.g. ``10.77.0.101/24``).
Once any node of the cluster has one, every node's agent runs keepalived (VRRP only, as
Ceph's NFS ingress does in its "keepalive-only" mode) with one VRRP instance per floating
address: the owner is MASTER with the highest priority, every other node BACKUP with a
priority by a stable order (the nodes after the owner by name, wrapping round), so that the
addresses of dead nodes spread over the survivors. Preemption stays on: an owner that comes
back takes its address back. A drained node serves nothing, so it holds no address while
another node lives: its priority is the lowest on every instance, its own included (it hands
its address to its first backup, and takes it back when it is made active again). Adverts go unicast to the other nodes' data addresses (no
multicast), from the interface that carries this node's data address, with a PASS
authentication derived from the cluster's sealing key (never logged, never sent by the
plane again).

NFS grace at once: with ``notify`` (a command), each instance of another node's address runs
``notify_master "<notify> <owner> master"`` when this node takes that address over, so that
the survivor puts the NFS cluster in grace for the owner's clients within a second of the
move (``services.file.takeover``), not only once the plane writes the owner down (15 s
later), and ``notify_backup`` / ``notify_fault`` with ``backup`` when the address leaves it.
keepalived runs it as root (``script_user root``) and refuses it unless the command and its
directories are writable by root only (``enable_script_security``).

The configuration is built as a dict (:func:`config`, unit-tested) and only printed by
:func:`render`; the agent writes it when it changes and sends keepalived SIGHUP.
"""
from __future__ import annotations

import hashlib
import hmac
import ipaddress
import socket
import subprocess

OWNER_PRIORITY = 200
FIRST_BACKUP_PRIORITY = 190    # the backups spread evenly from here ...
LAST_BACKUP_PRIORITY = 10      # ... down to here (see priority())
DRAINED_PRIORITY = 1           # a drained node: the last resort for every address
ADVERT_INT = 1                 # seconds: a backup takes over ~3 adverts after the last one
CONFIG_NAME = "keepalived.conf"


def auth_pass(secret_key: str) -> str:
    """The VRRP password of the cluster (8 characters, VRRPv2's limit), derived from the
    plane's sealing key that every node received when it joined."""
    return hmac.new(secret_key.encode(), b"strata-vrrp", hashlib.sha256).hexdigest()[:8]


def router_ids(addresses: list[str]) -> dict[str, int]:
    """A virtual_router_id (1-255) per floating address: its last byte (0 read as 1), the
    next free one on a clash, the addresses taken in sorted order so that every node
    derives the same ids."""
    ids: dict[str, int] = {}
    for address in sorted(addresses, key=lambda a: ipaddress.IPv4Interface(a)):
        vrid = int(ipaddress.IPv4Interface(address).ip) & 0xFF or 1
        while vrid in ids.values():
            vrid = vrid % 255 + 1
        ids[address] = vrid
    return ids


def backups_of(owner: str, names: list[str]) -> list[str]:
    """The nodes that take ``owner``'s address, first choice first: the names after the
    owner's in sorted order, wrapping round."""
    ordered = sorted(names)
    at = ordered.index(owner) if owner in ordered else -1
    return [n for n in ordered[at + 1:] + ordered[:max(at, 0)] if n != owner]


def priority(own: str, owner: str, names: list[str], drained: set[str] = frozenset()) -> int:
    """``own``'s priority on ``owner``'s address. The backups' priorities are spread far
    apart, not a point each: a backup declares the master dead after 3 adverts plus a skew of
    (256 - priority)/256 advert, so with priorities 100 and 99 the first two backups both took
    the address within 4 ms and it flapped between them (a client's connection reset) until
    their adverts settled it; 190 and 10 are 0.7 s apart."""
    if own in drained:
        return DRAINED_PRIORITY
    if own == owner:
        return OWNER_PRIORITY
    backups = backups_of(owner, names)
    if len(backups) == 1:
        return FIRST_BACKUP_PRIORITY
    step = max(1, (FIRST_BACKUP_PRIORITY - LAST_BACKUP_PRIORITY) // (len(backups) - 1))
    return max(DRAINED_PRIORITY + 1, FIRST_BACKUP_PRIORITY - step * backups.index(own))


def config(own: str, members: list[dict], interface: str, password: str,
           notify: str = "") -> dict:
    """keepalived's configuration for node ``own``: ``members`` are every node of the cluster
    as ``{"name", "data_address" (an IP), "floating_address" ("" when none), "drained"
    (optional)}``; ``notify``, when given, the command run with the owner's name and
    ``master`` when this node takes another node's address over, ``backup`` when it no longer
    holds it. Empty (``{}``) when no node has a floating
    address: keepalived does not run then."""
    owners = {m["name"]: m["floating_address"] for m in members if m.get("floating_address")}
    if not owners or own not in {m["name"] for m in members}:
        return {}
    names = [m["name"] for m in members]
    drained = {m["name"] for m in members if m.get("drained")}
    source = next(m["data_address"] for m in members if m["name"] == own)
    peers = sorted((m["data_address"] for m in members if m["name"] != own),
                   key=ipaddress.IPv4Address)
    ids = router_ids(list(owners.values()))
    instances = []
    for owner, address in sorted(owners.items()):
        instances.append({
            "name": f"strata_{owner}",
            "state": "MASTER" if owner == own and own not in drained else "BACKUP",
            "interface": interface, "virtual_router_id": ids[address],
            "priority": priority(own, owner, names, drained), "advert_int": ADVERT_INT,
            "unicast_src_ip": source, "unicast_peer": peers,
            "authentication": {"auth_type": "PASS", "auth_pass": password},
            "virtual_ipaddress": [f"{address} dev {interface}"]})
        if notify and owner != own:
            instances[-1]["notify_master"] = f'"{notify} {owner} master"'
            for state in ("notify_backup", "notify_fault"):   # the address left this node
                instances[-1][state] = f'"{notify} {owner} backup"'
    return {"global_defs": {"router_id": own, "enable_script_security": None,
                            "script_user": "root", "vrrp_garp_master_refresh": 10},
            "vrrp_instance": instances}


def _block(name: str, body, indent: str) -> list[str]:
    lines = [f"{indent}{name} {{"]
    inner = indent + "    "
    if isinstance(body, dict):
        for key, value in body.items():
            if isinstance(value, (dict, list)):
                lines += _block(key, value, inner)
            else:
                lines.append(f"{inner}{key}" if value is None else f"{inner}{key} {value}")
    else:
        lines += [f"{inner}{item}" for item in body]
    return lines + [f"{indent}}}"]


def render(conf: dict) -> str:
    """The text of keepalived.conf for :func:`config`'s dict."""
    lines = ["# written by the Strata node agent (plumbing/keepalived.py); do not edit"]
    lines += _block("global_defs", conf["global_defs"], "")
    for instance in conf["vrrp_instance"]:
        body = {k: v for k, v in instance.items() if k != "name"}
        lines += _block(f"vrrp_instance {instance['name']}", body, "")
    return "\n".join(lines) + "\n"


def argv(binary: str, conf_path: str, run_dir: str) -> list[str]:
    """keepalived in the foreground, VRRP only, logging to its stderr (the agent's log)."""
    return [binary, "--dont-fork", "--log-console", "--vrrp", "--use-file", conf_path,
            "--pid", f"{run_dir}/keepalived.pid", "--vrrp_pid", f"{run_dir}/vrrp.pid"]


def check(binary: str, conf_path: str) -> str:
    """keepalived's own check of a configuration file: "" when it passes, else its output."""
    proc = subprocess.run([binary, "--config-test", "--use-file", conf_path],
                          capture_output=True, text=True, timeout=30)
    return "" if proc.returncode == 0 else (proc.stderr or proc.stdout).strip()[-2000:]


def ipv4_of(address: str) -> str:
    """An address as IPv4 (a host name resolved)."""
    try:
        return str(ipaddress.IPv4Address(address))
    except ValueError:
        return socket.gethostbyname(address)


def interface_of(address: str) -> str:
    """The name of the interface that carries ``address`` (``ip -o -4 addr show``); ""
    when none does."""
    out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "inet" and fields[3].split("/")[0] == address:
            return fields[1].split("@")[0]
    return ""
