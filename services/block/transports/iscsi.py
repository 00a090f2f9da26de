"""iSCSI exports through tgtd (Debian `tgt`), reconciled with `tgtadm`.

One target per host group (IQN ``<iqn_base>:<group>``), one LUN per exported volume
(backing store ``rdwr`` on the volume file), initiator ACLs by IQN and by address, CHAP
accounts for the group's hosts (incoming) and an optional mutual-CHAP account (outgoing).

The desired state (exports and host groups) is recorded in ``<state_dir>/iscsi.json``;
every change computes a :class:`Plan` — add/update/remove sets against what
``tgtadm --op show`` reports — and applies it. tgtd keeps nothing across restarts, so
``start()`` simply reconciles again.

tgtd reads a backing file's size only when it opens it; :meth:`TgtdTarget.resize`
re-opens the file in place (``online=0``, ``path=<same>``, ``online=1``, with the target
offline meanwhile: see ``repoint`` below), so an initiator sees the new capacity on its next
READ CAPACITY without losing the target or the LUN.

:meth:`TgtdTarget.repoint` serves an export from another file (the volume moved to another
pool) the same way, with its target offline for the swap (tens of milliseconds): tgtd goes
on serving an offline non-removable LU and closes the old file under whatever its I/O
threads run, so the target is quiesced instead. Same target, LUN, SCSI id and serial, ACLs
and CHAP accounts afterwards. A command sent during the swap is not served then: the
initiator retries it, after a new login if it dropped the session (qemu's libiscsi did,
about 3 s later, in tests; a kernel initiator recovers the session within its
replacement timeout). Idle sessions notice nothing.

tgtd ignores SIGTERM: :meth:`stop` deletes the targets and then the system with
``tgtadm --op delete --mode system``.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from plumbing.atomic import write_json_atomic
from plumbing.process import Child, ChildFailed, wait_for_port

from .base import (
    DaemonError,
    ExportExists,
    ExportNotFound,
    Host,
    HostGroup,
    InvalidExport,
    QosLimits,
    Transport,
    check_export_id,
    check_host_address,
    check_initiator_name,
    check_volume_file,
    is_rbd,
    parse_rbd_path,
    require_installed,
    start_child,
    volume_size,
)
from .tgtadm import LiveTarget, Tgtadm

DEFAULT_IQN_BASE = "iqn.2026-01.io.strata"
OPEN_GROUP = "any"           # target name for exports without a host group (ACL ALL)


def shutdown_tgtd(tgtadm: Tgtadm, timeout: float = 5.0) -> None:
    """Stop a tgtd (it ignores SIGTERM): delete its targets, forcing sessions off, then the
    system; tgtd then exits. Once it no longer answers (at most ``timeout`` seconds), its
    control socket and lock file are removed from /var/run/tgtd."""
    for t in tgtadm.show_targets().values():
        tgtadm.run("--op", "delete", "--mode", "target", "--tid", str(t.tid), "--force")
    tgtadm.run("--op", "delete", "--mode", "system")
    deadline = time.monotonic() + timeout
    while tgtadm.answers() and time.monotonic() < deadline:
        time.sleep(0.05)
    tgtadm.remove_control_files()


def check_group_hosts(group: HostGroup) -> None:
    """InvalidExport unless every host of ``group`` names one initiator: only an export
    without a host group (allow_any) binds tgtd's ACL ``ALL``; a host's wildcard address or
    name would open the group's target to every initiator unannounced."""
    for h in group.hosts:
        if h.iqn:
            check_initiator_name(h.iqn)
        if h.address:
            check_host_address(h.address)


def _one_initiator(host: Host) -> bool:
    try:
        check_group_hosts(HostGroup("", [host]))
        return True
    except InvalidExport:
        return False


def pick_control_port() -> int:
    """A tgtd control-socket number (-C, at most 32767) that no tgtd here is using."""
    for _ in range(100):
        n = random.randint(1000, 32000)
        if not os.path.exists(f"/var/run/tgtd/socket.{n}"):
            return n
    return random.randint(1000, 32000)


@dataclass
class LunSpec:
    """A desired LUN: number, backing path (a file, or POOL/IMAGE of an RBD image), read-only
    flag, tgtd backing store (``rdwr``, or ``rbd`` with its ``conf=...;id=...`` options) and
    the volume path it came from."""

    lun: int
    path: str
    read_only: bool = False
    bstype: str = "rdwr"
    bsopts: str = ""
    source: str = ""

    @classmethod
    def of(cls, lun: int, volume_path: str, read_only: bool) -> "LunSpec":
        """The LUN serving ``volume_path``: a file through ``rdwr``, an RBD image through
        tgtd's ``rbd`` backing store (tgt-rbd: librbd inside tgtd)."""
        if is_rbd(volume_path):
            spec = parse_rbd_path(volume_path)
            return cls(lun, f"{spec['pool']}/{spec['image']}", read_only, "rbd",
                       f"conf={spec['conf']};id={spec['id']}", volume_path)
        return cls(lun, volume_path, read_only, source=volume_path)


@dataclass
class TargetSpec:
    """A desired target. ``allow_all`` binds the ACL ``ALL`` (no initiator filtering)."""

    iqn: str
    luns: list[LunSpec] = field(default_factory=list)
    initiator_names: list[str] = field(default_factory=list)
    initiator_addresses: list[str] = field(default_factory=list)
    allow_all: bool = False
    chap: dict[str, str] = field(default_factory=dict)          # incoming user -> secret
    mutual_chap: tuple[str, str] | None = None                   # outgoing (user, secret)


@dataclass
class Plan:
    """What reconcile will do, as readable add/update/remove lines plus the tgtadm calls."""

    add: list[str] = field(default_factory=list)
    update: list[str] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)
    steps: list[tuple[str, ...]] = field(default_factory=list)

    def empty(self) -> bool:
        return not self.steps


class TgtdTarget(Transport):
    """Supervise one tgtd and keep its targets equal to the recorded exports."""

    protocols = ("iscsi",)

    def __init__(self, state_dir: str | Path, *, portal_host: str = "127.0.0.1",
                 portal_port: int = 3260, control_port: int | None = None,
                 iqn_base: str = DEFAULT_IQN_BASE, adopt_only: bool = False):
        self.state_dir = Path(state_dir)
        self.adopt_only = adopt_only             # never start tgtd: its supervisor does
        self.portal_host = portal_host
        self.portal_port = portal_port
        self.iqn_base = iqn_base
        self.record_path = self.state_dir / "iscsi.json"
        self._proc: Child | None = None
        self._adopted = False                    # a tgtd of ours that outlived our process
        self._secrets: dict[str, str] = {}      # CHAP secrets tgtd currently holds
        rec = self._load_record()
        self._exports: dict[str, dict] = rec.get("exports", {})
        self._groups: dict[str, dict] = rec.get("groups", {})
        # the control socket number is kept in the record so a restarted plane finds its tgtd
        self.control_port = control_port or rec.get("control_port") or pick_control_port()
        self.tgtadm = Tgtadm(self.control_port)

    def _answers(self) -> bool:
        return self.tgtadm.answers()

    # ---------------------------------------------------------------- daemon lifecycle
    def start(self) -> None:
        """Start tgtd in the foreground on the portal, wait until it answers, reconcile."""
        if self._proc is not None and self._proc.running():
            return
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._save_record()
        if self._answers() and wait_for_port(self.portal_host, self.portal_port, 0.5):
            # our tgtd from before a restart of the plane: keep it, reconcile its state
            self._adopted = True
            self._secrets = {}
            self.reconcile()
            return
        require_installed("tgtd", "tgtadm")
        if self.adopt_only:
            raise DaemonError("tgtd is not running (it is being started again); try again "
                              "in a moment")
        argv = ["tgtd", "-f", "-C", str(self.control_port),
                "--iscsi", f"portal={self.portal_host}:{self.portal_port}"]
        self._proc = start_child("tgtd", argv, self.state_dir / "tgtd.log")
        try:
            self._proc.wait_ready(self._answers, 10, f"control port {self.control_port}")
        except ChildFailed as exc:
            self._proc.stop(timeout=5.0)
            raise DaemonError(f"tgtd did not start: {exc}: {exc.tail}") from None
        if not wait_for_port(self.portal_host, self.portal_port, 5, self._proc):
            self.stop()
            raise DaemonError(f"tgtd is not listening on {self.portal_host}:{self.portal_port}")
        self._secrets = {}
        self.reconcile()

    def stop(self) -> None:
        """Delete every target (forcing sessions off) and the system; SIGKILL the PID if stuck."""
        if self._proc is None and not self._adopted:
            return
        if self._adopted or self._proc.running():
            try:
                shutdown_tgtd(self.tgtadm)
            except DaemonError:
                pass
            if self._proc is not None and not self._proc.wait_exit(5.0):
                self._proc.stop(timeout=0.5)
            deadline = time.monotonic() + 5        # an adopted tgtd is not our child
            while self._proc is None and self._answers() and time.monotonic() < deadline:
                time.sleep(0.05)
        self.tgtadm.remove_control_files()         # also after a SIGKILL
        self._proc = None
        self._adopted = False

    def detach(self) -> None:
        """Forget the process handle; tgtd keeps serving (start() adopts it again)."""
        self._proc = None
        self._adopted = False

    def health(self) -> dict:
        """Running state, PID, number of LUNs live versus recorded."""
        running = (self._proc is not None and self._proc.running()) or \
            (self._adopted and self._answers())
        detail, luns = ("running" if running else "not running"), 0
        if running:
            try:
                live = self.tgtadm.show_targets()
                luns = sum(len(t.luns) for t in live.values())
                if not self.plan(live).empty():
                    detail = "live state differs from the recorded exports; reconcile"
            except DaemonError as exc:
                running, detail = False, str(exc)
        return {"running": running, "pid": self._proc.pid if self._proc else None,
                "exports": luns, "detail": detail,
                "portal": f"{self.portal_host}:{self.portal_port}"}

    # ---------------------------------------------------------------- the plane's API
    def set_host_group(self, group: HostGroup) -> Plan:
        """Record a host group's hosts and CHAP settings and apply them to its target."""
        check_group_hosts(group)
        self._groups[group.name] = asdict(group)
        self._save_record()
        return self.reconcile()

    def remove_host_group(self, name: str) -> Plan:
        """Forget a host group; refused while exports still use it."""
        users = [e for e, r in self._exports.items() if r["group"] == name]
        if users:
            raise InvalidExport(f"host group {name} still has exports: {', '.join(users)}")
        self._groups.pop(name, None)
        self._save_record()
        return self.reconcile()

    def export(self, export_id: str, volume_path: str, *, protocol: str | None = "iscsi",
               read_only: bool = False, host_group: HostGroup | None = None,
               qos: QosLimits | None = None) -> dict:
        """Add the volume as the next free LUN of its host group's target.

        Without a host group the LUN goes to the open target (ACL ALL).
        """
        check_export_id(export_id)
        if protocol not in (None, "iscsi"):
            raise InvalidExport(f"tgtd serves iscsi, not {protocol}")
        if qos is not None and any(asdict(qos).values()):
            raise InvalidExport("tgtd has no per-LUN QoS; export over nbd/vhost-user-blk "
                                "(qemu-storage-daemon) or nvmf (spdk driver) to limit I/O")
        path = str(check_volume_file(volume_path))
        if host_group is not None:
            check_group_hosts(host_group)
        group = host_group.name if host_group else OPEN_GROUP
        if export_id in self._exports:
            old = self._exports[export_id]
            if (old["path"], old["read_only"], old["group"]) != (path, bool(read_only), group):
                raise ExportExists(f"export {export_id} already exists for {old['path']}; "
                                   f"unexport it first")
            return self.connection_info(export_id)
        if host_group is not None:
            self._groups[group] = asdict(host_group)
        used = {r["lun"] for r in self._exports.values() if r["group"] == group}
        lun = next(n for n in range(1, 256) if n not in used)
        self._exports[export_id] = {"path": path, "read_only": bool(read_only),
                                    "group": group, "lun": lun}
        try:
            self.reconcile()
        except Exception:
            del self._exports[export_id]
            self.reconcile()
            raise
        self._save_record()
        return self.connection_info(export_id)

    def unexport(self, export_id: str) -> None:
        """Remove the LUN (and the target when it was the group's last LUN)."""
        if export_id not in self._exports:
            raise ExportNotFound(f"no iSCSI export {export_id}")
        del self._exports[export_id]
        self._save_record()
        self.reconcile()

    def resize(self, export_id: str) -> int:
        """Re-open the LUN's backing file so tgtd reports its new size; return the size."""
        rec = self._get(export_id)
        live = self.tgtadm.show_targets().get(self.target_iqn(rec["group"]))
        if live is None or rec["lun"] not in live.luns:
            raise DaemonError(f"export {export_id} is not live in tgtd; reconcile first")
        self._swap_backing(live.tid, rec["lun"], LunSpec.of(0, rec["path"], False).path)
        return volume_size(rec["path"])

    def repoint(self, export_id: str, volume_path: str) -> dict:
        """Serve the export's LUN from ``volume_path`` (module doc); same target and LUN.

        Idempotent. On failure the LUN is put back on the old file and DaemonError says why.
        """
        rec = self._get(export_id)
        path = str(check_volume_file(volume_path))
        old = rec["path"]
        if old == path:
            return self.connection_info(export_id)
        live = self.tgtadm.show_targets().get(self.target_iqn(rec["group"]))
        tid = live.tid if live is not None and rec["lun"] in live.luns else None

        def serve(p, reconcile):
            rec["path"] = p
            if tid is not None:
                self._swap_backing(tid, rec["lun"], LunSpec.of(0, p, False).path)
            if tid is None or reconcile:
                self.reconcile()               # adds it when not live; resets the flags
            lu = self.tgtadm.show_targets()[self.target_iqn(rec["group"])].luns.get(rec["lun"])
            # tgtd opens a file it cannot write read-only, silently: that is a refusal too
            if lu is None or lu.path != p or lu.read_only != rec["read_only"]:
                state = "absent" if lu is None else f"{lu.path}, read-only {lu.read_only}"
                raise DaemonError(f"tgtd did not open {p} as asked (LUN: {state})")
        try:
            serve(path, reconcile=False)
        except Exception as exc:
            try:
                serve(old, reconcile=True)
            except DaemonError as back:        # the first error is the one to report
                raise DaemonError(f"export {export_id} cannot be served from {path} ({exc}) "
                                  f"nor again from {old}: {back}") from exc
            raise DaemonError(f"export {export_id} cannot be served from {path}: {exc}; it "
                              f"still serves {old}") from exc
        self._save_record()
        return self.connection_info(export_id)

    def connection_info(self, export_id: str) -> dict:
        """{"protocol": "iscsi", "target_iqn", "portal", "lun"} (no secrets)."""
        rec = self._get(export_id)
        return {"protocol": "iscsi", "export_id": export_id,
                "target_iqn": self.target_iqn(rec["group"]),
                "portal": f"{self.portal_host}:{self.portal_port}", "lun": rec["lun"],
                "read_only": rec["read_only"]}

    def list_exports(self) -> list[str]:
        return sorted(self._exports)

    def volume_of(self, export_id: str) -> str:
        return self._get(export_id)["path"]

    def target_iqn(self, group: str) -> str:
        """The IQN of a host group's target."""
        return f"{self.iqn_base}:{group}"

    # ---------------------------------------------------------------- reconcile
    def desired_targets(self) -> dict[str, TargetSpec]:
        """Build the desired targets from the recorded exports and host groups."""
        targets: dict[str, TargetSpec] = {}
        for rec in self._exports.values():
            iqn = self.target_iqn(rec["group"])
            spec = targets.get(iqn)
            if spec is None:
                spec = targets[iqn] = self._target_for_group(iqn, rec["group"])
            spec.luns.append(LunSpec.of(rec["lun"], rec["path"], rec["read_only"]))
        return targets

    def _target_for_group(self, iqn: str, group_name: str) -> TargetSpec:
        if group_name == OPEN_GROUP and group_name not in self._groups:
            return TargetSpec(iqn, allow_all=True)
        g = self._groups.get(group_name)
        if g is None:
            raise InvalidExport(f"host group {group_name} is not known; set_host_group first")
        hosts = [Host(**h) for h in g["hosts"]]
        # a record written before set_host_group checked hosts may still hold a wildcard:
        # it is left out of the ACL (closed, not open), and the target still serves the rest
        spec = TargetSpec(iqn, initiator_names=sorted(
                              {h.iqn for h in hosts if h.iqn and _one_initiator(h)}),
                          initiator_addresses=sorted(
                              {h.address for h in hosts if h.address and _one_initiator(h)}))
        for h in hosts:
            if h.chap_user:
                if not h.chap_secret or not 12 <= len(h.chap_secret) <= 16:
                    raise InvalidExport(f"host {h.name}: the CHAP secret must be 12 to 16 "
                                        f"characters (iSCSI initiators reject others)")
                if spec.chap.get(h.chap_user, h.chap_secret) != h.chap_secret:
                    raise InvalidExport(f"CHAP user {h.chap_user} has two different secrets")
                spec.chap[h.chap_user] = h.chap_secret
        if g.get("mutual_chap_user"):
            spec.mutual_chap = (g["mutual_chap_user"], g.get("mutual_chap_secret") or "")
        return spec

    def plan(self, live: dict[str, LiveTarget] | None = None) -> Plan:
        """Compare desired and live state; return the add/update/remove plan (not applied)."""
        desired = self.desired_targets()
        live = self.tgtadm.show_targets() if live is None else live
        accounts = self.tgtadm.show_accounts()
        p = Plan()
        # CHAP accounts are global in tgtd: one secret per user name
        want_accounts: dict[str, str] = {}
        for t in desired.values():
            pairs = list(t.chap.items()) + ([t.mutual_chap] if t.mutual_chap else [])
            for user, secret in pairs:
                if want_accounts.setdefault(user, secret) != secret:
                    raise InvalidExport(f"CHAP user {user} is used with two different secrets")
        for iqn, lt in live.items():
            if iqn not in desired:
                p.remove.append(f"target {iqn}")
                p.steps.append(("--op", "delete", "--mode", "target", "--tid", str(lt.tid),
                                "--force"))
        changed: set[str] = set()
        for user in sorted(accounts):
            if user in want_accounts and self._secrets.get(user) != want_accounts[user]:
                changed.add(user)
                p.update.append(f"account {user} (secret)")
                for lt in live.values():
                    if user in lt.incoming or user in lt.outgoing:
                        p.steps.append(self._unbind(lt.tid, user, user in lt.outgoing))
                        lt.incoming.discard(user)
                        lt.outgoing.discard(user)
                p.steps.append(("--op", "delete", "--mode", "account", "--user", user))
                accounts = accounts - {user}
        for user, secret in sorted(want_accounts.items()):
            if user not in accounts:
                if user not in changed:
                    p.add.append(f"account {user}")
                p.steps.append(("--op", "new", "--mode", "account", "--user", user,
                                "--password", secret))
        used_tids = {lt.tid for lt in live.values() if lt.iqn in desired}
        for iqn, t in sorted(desired.items()):
            lt = live.get(iqn)
            if lt is None:
                tid = next(n for n in range(1, 10000) if n not in used_tids)
                used_tids.add(tid)
                lt = LiveTarget(tid, iqn)
                p.add.append(f"target {iqn}")
                p.steps.append(("--op", "new", "--mode", "target", "--tid", str(tid), "-T", iqn))
            self._plan_target(p, t, lt)
        for user in sorted(accounts - set(want_accounts)):
            p.remove.append(f"account {user}")
            p.steps.append(("--op", "delete", "--mode", "account", "--user", user))
        return p

    def _plan_target(self, p: Plan, t: TargetSpec, lt: LiveTarget) -> None:
        tid = str(lt.tid)
        want = {ls.lun: ls for ls in t.luns}
        for n, ll in sorted(lt.luns.items()):
            ls = want.get(n)
            if ls is None or ll.path != ls.path:
                p.remove.append(f"{t.iqn} lun {n}")
                p.steps.append(("--op", "delete", "--mode", "logicalunit", "--tid", tid,
                                "--lun", str(n)))
                lt.luns.pop(n)
        for n, ls in sorted(want.items()):
            ll = lt.luns.get(n)
            if ll is None:
                p.add.append(f"{t.iqn} lun {n} {ls.path}")
                p.steps.append(("--op", "new", "--mode", "logicalunit", "--tid", tid,
                                "--lun", str(n), "-b", ls.path, "--bstype", ls.bstype)
                               + (("--bsopts", ls.bsopts) if ls.bsopts else ()))
                if ls.read_only:
                    p.steps.append(self._lu_param(tid, n, "readonly=1"))
                continue
            if ll.read_only != ls.read_only:
                p.update.append(f"{t.iqn} lun {n} read_only={ls.read_only}")
                p.steps.append(self._lu_param(tid, n, f"readonly={int(ls.read_only)}"))
            if ll.size_mb != (volume_size(ls.source or ls.path) + 500_000) // 1_000_000:
                p.update.append(f"{t.iqn} lun {n} size")
                p.steps += [self._lu_param(tid, n, "online=0"),
                            self._lu_param(tid, n, f"path={ls.path}"),
                            self._lu_param(tid, n, "online=1")]
        acl = [("-Q", name) for name in t.initiator_names] + \
              [("-I", addr) for addr in (["ALL"] if t.allow_all else t.initiator_addresses)]
        live_acl = [("-Q", n) for n in lt.acl_names] + [("-I", a) for a in lt.acl_addresses]
        for flag, value in sorted(set(live_acl) - set(acl)):
            p.remove.append(f"{t.iqn} acl {value}")
            p.steps.append(("--op", "unbind", "--mode", "target", "--tid", tid, flag, value))
        for flag, value in sorted(set(acl) - set(live_acl)):
            p.add.append(f"{t.iqn} acl {value}")
            p.steps.append(("--op", "bind", "--mode", "target", "--tid", tid, flag, value))
        want_out = {t.mutual_chap[0]} if t.mutual_chap else set()
        for users, live_users, outgoing in ((set(t.chap), lt.incoming, False),
                                            (want_out, lt.outgoing, True)):
            for user in sorted(live_users - users):
                p.remove.append(f"{t.iqn} account {user}")
                p.steps.append(self._unbind(lt.tid, user, outgoing))
            for user in sorted(users - live_users):
                p.add.append(f"{t.iqn} account {user}")
                p.steps.append(("--op", "bind", "--mode", "account", "--tid", tid,
                                "--user", user) + (("--outgoing",) if outgoing else ()))

    @staticmethod
    def _unbind(tid: int, user: str, outgoing: bool) -> tuple[str, ...]:
        return ("--op", "unbind", "--mode", "account", "--tid", str(tid), "--user", user) + \
            (("--outgoing",) if outgoing else ())

    @staticmethod
    def _lu_param(tid: str, lun: int, param: str) -> tuple[str, ...]:
        return ("--op", "update", "--mode", "logicalunit", "--tid", tid, "--lun", str(lun),
                "--params", param)

    def reconcile(self) -> Plan:
        """Make tgtd match the record; return the plan that was applied."""
        p = self.plan()
        for step in p.steps:
            self.tgtadm.run(*step)
            if step[:4] == ("--op", "new", "--mode", "account"):
                self._secrets[step[5]] = step[7]
        return p

    def _swap_backing(self, tid: int, lun: int, path: str) -> None:
        """Re-open a LUN on ``path`` with its target offline: tgtd keeps reading and writing
        a non-removable LU that is offline, and closes the old file under any command its
        I/O threads are running, so new commands are held off (the target answers none;
        initiators retry or log in again) and the ones in flight finish first."""
        def state(value):
            self.tgtadm.run("--op", "update", "--mode", "target", "--tid", str(tid),
                            "--name", "state", "--value", value)
        state("offline")
        try:
            time.sleep(0.05)                   # commands already in tgtd's I/O threads
            self._refresh_lun(tid, lun, path)
        finally:
            state("ready")

    def _refresh_lun(self, tid: int, lun: int, path: str) -> None:
        for param in ("online=0", f"path={path}", "online=1"):
            self.tgtadm.run(*self._lu_param(str(tid), lun, param))

    # ---------------------------------------------------------------- record
    def _get(self, export_id: str) -> dict:
        try:
            return self._exports[export_id]
        except KeyError:
            raise ExportNotFound(f"no iSCSI export {export_id}") from None

    def _load_record(self) -> dict:
        try:
            return json.loads(self.record_path.read_text())
        except FileNotFoundError:
            return {}

    def _save_record(self) -> None:
        write_json_atomic(self.record_path, {"exports": self._exports, "groups": self._groups,
                                             "control_port": self.control_port},
                          mode=0o600, indent=1, sort_keys=True)     # holds CHAP secrets
