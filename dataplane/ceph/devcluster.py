"""A small Ceph cluster on one address (127.0.0.1 unless told) for development and tests
(no Django).

One mon, one mgr, three OSDs on file-backed BlueStore (each under its own CRUSH ``host``
bucket ``host0..host2``, so a ``host`` failure domain is testable on one machine) and two
MDS daemons (standby until a file system exists). Memory is kept small (osd_memory_target,
mon and MDS caches). Every daemon's PID is recorded in ``DIR/pids.json``; ``down`` stops
them by PID (after checking /proc/PID/cmdline names this cluster's ceph.conf), never by name.

Command line (as root)::

    python -m dataplane.ceph.devcluster up DIR      # prints DIR/ceph.conf; HEALTH_OK
    python -m dataplane.ceph.devcluster down DIR    # stops every daemon, keeps DIR
    python -m dataplane.ceph.devcluster status DIR

From Python::

    cluster = DevCluster(DIR).up()            # waits for HEALTH_OK (about 20-40 s)
    cluster.conf, cluster.keyring              # DIR/ceph.conf, DIR/ceph.client.admin.keyring
    cluster.client                             # "admin" (client.admin)
    cluster.command("osd tree")                # a mon command's JSON answer
    cluster.kill_osd(1); cluster.start_osd(1)  # SIGKILL one "host", start it again
    cluster.start_rgw(PORT, replicas=1)        # radosgw (S3) on 127.0.0.1:PORT; stop_rgw()
    cluster.rgw_user("bench", ACCESS, SECRET)  # an S3 user of that radosgw
    cluster.wait_healthy()
    cluster.down()

``DevCluster(DIR, address="10.78.0.1")`` makes the daemons listen on another address of this
host instead of 127.0.0.1 (one that network namespaces, guests and container hosts can route
to; the tests add one to ``lo``, see ``tests/ceph.py``). The address is kept with the
cluster, so a restart uses it again.

``DevCluster(DIR).up()`` on a DIR whose cluster was stopped starts the same cluster again.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from plumbing.atomic import write_atomic, write_json_atomic
from plumbing.process import free_port, port_open

from ..errors import CommandFailed, Unreachable

OSDS = 3
MDS_NAMES = ("a", "b")
MGR_NAME = "x"
MON_NAME = "a"
GiB = 1 << 30
# the default zone's pools (radosgw 16.2 makes them on first use, with the default size)
RGW_POOLS = (".rgw.root", "default.rgw.control", "default.rgw.meta", "default.rgw.log",
             "default.rgw.buckets.index", "default.rgw.buckets.data",
             "default.rgw.buckets.non-ec")


def ceph_key() -> str:
    """A new cephx secret, encoded as ceph-authtool does (type, created, length, 16 bytes)."""
    return base64.b64encode(struct.pack("<HIIH", 1, int(time.time()), 0, 16)
                            + os.urandom(16)).decode()


def _keyring_entry(name: str, key: str, caps: dict) -> str:
    lines = [f"[{name}]", f"\tkey = {key}"]
    lines += [f'\tcaps {what} = "{cap}"' for what, cap in caps.items()]
    return "\n".join(lines) + "\n"


def _entities() -> dict:
    """Every cephx entity of the cluster and its capabilities."""
    everything = {"mon": "allow *", "osd": "allow *", "mds": "allow *", "mgr": "allow *"}
    ents = {"mon.": {"mon": "allow *"}, "client.admin": everything,
            f"mgr.{MGR_NAME}": {"mon": "allow profile mgr", "osd": "allow *", "mds": "allow *"}}
    for i in range(OSDS):
        ents[f"osd.{i}"] = {"mon": "allow profile osd", "mgr": "allow profile osd",
                            "osd": "allow *"}
    for m in MDS_NAMES:
        ents[f"mds.{m}"] = {"mon": "allow profile mds", "osd": "allow rwx", "mds": "allow",
                            "mgr": "allow profile mds"}
    return ents


class DevCluster:
    """A development Ceph cluster kept in ``root`` (see the module doc)."""

    def __init__(self, root, osd_size: int = 10 * GiB, osd_memory_target: int = 512 << 20,
                 address: str = "127.0.0.1"):
        self.root = Path(root).absolute()
        self.address = self._state().get("address", address)
        self.osd_size = osd_size
        self.osd_memory_target = osd_memory_target
        self.conf = self.root / "ceph.conf"
        self.keyring = self.root / "ceph.client.admin.keyring"
        self.client = "admin"
        self._pids_file = self.root / "pids.json"

    # -- the cluster's files -------------------------------------------------------------
    def _state(self) -> dict:
        try:
            return json.loads((self.root / "cluster.json").read_text())
        except FileNotFoundError:
            return {}

    def _write_conf(self, state: dict) -> None:
        r = self.root
        run = state["run_dir"]
        conf = f"""[global]
fsid = {state['fsid']}
mon_host = v2:{self.address}:{state['mon_port']}
public_addr = {self.address}
ms_bind_msgr1 = false
ms_bind_ipv6 = false
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
auth_allow_insecure_global_id_reclaim = false
run_dir = {run}
admin_socket = {run}/$name.asok
log_file = {r}/log/$name.log
mon_cluster_log_file = {r}/log/cluster.log
crash_dir = {r}/crash
mon_data = {r}/mon/$cluster-$id
osd_data = {r}/osd/$cluster-$id
mgr_data = {r}/mgr/$cluster-$id
mds_data = {r}/mds/$cluster-$id
osd_pool_default_size = 3
osd_pool_default_min_size = 2
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
mon_allow_pool_delete = true
mon_allow_pool_size_one = true
mon_max_pg_per_osd = 1000
mon_data_avail_warn = 1
mon_data_avail_crit = 0
mon_warn_on_pool_no_redundancy = false
mon_osd_min_down_reporters = 1
mon_memory_target = 268435456
mgr_initial_modules = iostat
# a one-node cluster commits map changes (pool and snapshot creation) without batching them
paxos_propose_interval = 0.05
paxos_min_wait = 0.01
mgr_stats_period = 1
osd_memory_target = {self.osd_memory_target}
osd_objectstore = bluestore
bluestore_block_create = true
bluestore_block_size = {self.osd_size}
bluestore_cache_autotune = true
osd_heartbeat_interval = 2
osd_heartbeat_grace = 8
mds_cache_memory_limit = 134217728
mon_osd_full_ratio = 0.97
mon_osd_backfillfull_ratio = 0.95
mon_osd_nearfull_ratio = 0.93

[client]
keyring = {r}/ceph.$name.keyring
"""
        for i in range(OSDS):
            conf += (f"\n[osd.{i}]\ncrush_location = root=default host=host{i}\n"
                     f"bluestore_block_path = {r}/blocks/osd.{i}.block\n")
        write_atomic(self.conf, conf)

    def _create(self) -> dict:
        """Write conf and keys and make the mon's store; returns the cluster's state."""
        r = self.root
        for sub in ("log", "crash", "mon", "osd", "mgr", "mds", "blocks"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        run_dir = r / "run"
        if len(str(run_dir)) > 60:       # unix socket paths are limited to 107 bytes
            run_dir = Path(tempfile.mkdtemp(prefix="ceph-run-"))
        run_dir.mkdir(exist_ok=True)
        state = {"fsid": str(uuid.uuid4()), "mon_port": free_port(), "run_dir": str(run_dir),
                 "osd_uuids": [str(uuid.uuid4()) for _ in range(OSDS)], "osds_made": [],
                 "address": self.address}
        self._write_conf(state)
        keys = {name: ceph_key() for name in _entities()}
        everything = "".join(_keyring_entry(n, keys[n], caps) for n, caps in _entities().items())
        mon_keyring = r / "mon.keyring"
        write_atomic(mon_keyring, everything, mode=0o600)
        write_atomic(self.keyring, _keyring_entry("client.admin", keys["client.admin"],
                                                  _entities()["client.admin"]), mode=0o600)
        data = {f"mgr.{MGR_NAME}": r / "mgr" / f"ceph-{MGR_NAME}",
                **{f"osd.{i}": r / "osd" / f"ceph-{i}" for i in range(OSDS)},
                **{f"mds.{m}": r / "mds" / f"ceph-{m}" for m in MDS_NAMES}}
        for name, path in data.items():
            path.mkdir(parents=True, exist_ok=True)
            write_atomic(path / "keyring", _keyring_entry(name, keys[name], {}), mode=0o600)
        monmap = r / "monmap"
        _run(["monmaptool", "--create", "--clobber", "--fsid", state["fsid"],
              "--addv", MON_NAME, f"[v2:{self.address}:{state['mon_port']}]", str(monmap)])
        _run(["ceph-mon", "-c", self.conf, "--mkfs", "-i", MON_NAME, "--monmap", monmap,
              "--keyring", mon_keyring])
        write_json_atomic(r / "cluster.json", state, indent=2)
        return state

    # -- processes -----------------------------------------------------------------------
    def _pids(self) -> dict:
        try:
            return json.loads(self._pids_file.read_text())
        except FileNotFoundError:
            return {}

    def _record_pid(self, name: str, pid) -> None:
        pids = self._pids()
        if pid is None:
            pids.pop(name, None)
        else:
            pids[name] = pid
        write_json_atomic(self._pids_file, pids, indent=2)

    def _ours(self, pid: int) -> bool:
        """True if ``pid`` runs a daemon of this cluster (its argv names our ceph.conf)."""
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        if os.path.exists(f"/proc/{pid}/stat"):
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[-1].split()[0] == "Z":    # a zombie: reap it
                    _reap(pid)
                    return False
        return str(self.conf).encode() in argv

    def _start(self, kind: str, ident: str, argv: list | None = None) -> int:
        name = f"{kind}.{ident}"
        pid = self._pids().get(name)
        if pid and self._ours(pid):
            return pid
        log = open(self.root / "log" / f"{name}.out", "ab")
        try:
            proc = subprocess.Popen(argv or [f"ceph-{kind}", "-f", "-c", str(self.conf), "-i", ident],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    start_new_session=True, close_fds=True)
        finally:
            log.close()
        self._record_pid(name, proc.pid)
        return proc.pid

    def _stop(self, name: str, sig=signal.SIGTERM, timeout: float = 10.0) -> None:
        pid = self._pids().get(name)
        if pid and self._ours(pid):
            os.kill(pid, sig)
            deadline = time.monotonic() + timeout
            while self._ours(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if self._ours(pid):
                os.kill(pid, signal.SIGKILL)
                while self._ours(pid):
                    time.sleep(0.05)
            _reap(pid, wait=True)  # a daemon we started is our child: leave no zombie
        self._record_pid(name, None)

    def _mkfs_osds(self, state: dict) -> None:
        todo = [i for i in range(OSDS) if i not in state["osds_made"]]
        procs = []
        for i in todo:
            osd_uuid = state["osd_uuids"][i]
            got = self.command("osd new", uuid=osd_uuid, id=i)
            if isinstance(got, dict):
                got = got.get("osdid")
            if got != i:
                raise CommandFailed(["osd new"], 1, f"the mon gave id {got}, not {i}")
            procs.append((i, subprocess.Popen(
                ["ceph-osd", "-c", str(self.conf), "-i", str(i), "--mkfs",
                 "--osd-uuid", osd_uuid], stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
        for i, proc in procs:
            out = proc.communicate(timeout=120)[0].decode(errors="replace")
            if proc.returncode:
                raise CommandFailed(["ceph-osd", "--mkfs", "-i", str(i)], proc.returncode, out)
            state["osds_made"].append(i)
        write_json_atomic(self.root / "cluster.json", state, indent=2)

    # -- the cluster -----------------------------------------------------------------------
    def up(self, timeout: float = 120) -> "DevCluster":
        """Create (first time) and start every daemon; return once HEALTH_OK."""
        self.root.mkdir(parents=True, exist_ok=True)
        state = self._state() or self._create()
        Path(state["run_dir"]).mkdir(parents=True, exist_ok=True)
        try:
            self._start("mon", MON_NAME)
            self._start("mgr", MGR_NAME)
            self._wait(lambda: self.command("mon stat") is not None, 30, "the mon to answer")
            self._mkfs_osds(state)
            for i in range(OSDS):
                self._start("osd", str(i))
            for m in MDS_NAMES:
                self._start("mds", m)
            self.wait_healthy(timeout)
        except BaseException:
            self.down()
            raise
        return self

    def down(self, sig=signal.SIGTERM) -> None:
        """Stop every daemon of this cluster by its recorded PID (MDS and OSDs before the
        mon; SIGKILL after 10 s); the data stays in ``root``."""
        order = ([n for n in self._pids() if n.startswith("rgw.")]
                 + [f"mds.{m}" for m in MDS_NAMES] + [f"osd.{i}" for i in range(OSDS)]
                 + [f"mgr.{MGR_NAME}", f"mon.{MON_NAME}"])
        for name in order:
            self._stop(name, sig=sig)

    def destroy(self) -> None:
        """Stop the daemons and delete ``root`` (and a run dir kept outside it)."""
        import shutil

        self.down(sig=signal.SIGKILL)     # its data goes too: no need to stop gracefully
        run_dir = self._state().get("run_dir")
        if run_dir and not run_dir.startswith(str(self.root)):
            shutil.rmtree(run_dir, ignore_errors=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def kill_osd(self, osd: int, sig=signal.SIGKILL) -> None:
        """Kill one OSD (the only OSD of CRUSH host ``host{osd}``) with ``sig``."""
        self._stop(f"osd.{osd}", sig=sig)

    def start_osd(self, osd: int) -> int:
        """Start an OSD again; returns its PID."""
        return self._start("osd", str(osd))

    def start_rgw(self, port: int, name: str = "s3", replicas: int | None = None,
                  timeout: float = 60) -> int:
        """Start a radosgw (Debian ``radosgw``) as ``client.rgw.NAME``, serving S3 on
        127.0.0.1:``port`` (beast, with tcp_nodelay: without it small GETs wait ~48 ms);
        returns its PID once the port answers. ``replicas`` makes the default zone's pools
        before radosgw does, with that size (the cluster's default is 3, one copy a host);
        it is stopped by :meth:`down` like the other daemons."""
        entity = f"client.rgw.{name}"
        got = self.command("auth get-or-create", entity=entity,
                           caps=["mon", "allow rw", "osd", "allow rwx", "mgr", "allow rw"])
        key = got[0]["key"] if isinstance(got, list) else got["key"]
        write_atomic(self.root / f"ceph.{entity}.keyring", _keyring_entry(entity, key, {}),
                     mode=0o600)
        if replicas:
            for pool in RGW_POOLS:
                self.command("osd pool create", pool=pool, pg_num=8)
                self.command("osd pool set", pool=pool, var="size", val=str(replicas),
                             yes_i_really_mean_it=True)
                self.command("osd pool set", pool=pool, var="min_size", val="1")
                self.command("osd pool application enable", pool=pool, app="rgw")
        data = self.root / "rgw" / name
        data.mkdir(parents=True, exist_ok=True)
        pid = self._start("rgw", name, ["radosgw", "-f", "-c", str(self.conf), "-n", entity,
                                        "--rgw-data", str(data), "--rgw-frontends",
                                        f"beast endpoint=127.0.0.1:{port} tcp_nodelay=1"])
        self._wait(lambda: port_open("127.0.0.1", port), timeout, f"radosgw on port {port}")
        return pid

    def stop_rgw(self, name: str = "s3") -> None:
        """Stop the radosgw ``client.rgw.NAME`` (SIGTERM, SIGKILL after 10 s)."""
        self._stop(f"rgw.{name}")

    def rgw_user(self, uid: str, access_key: str, secret_key: str) -> None:
        """Create an S3 user of the cluster's radosgw with these keys (``radosgw-admin``)."""
        _run(["radosgw-admin", "-c", self.conf, "-n", "client.admin", "user", "create",
              f"--uid={uid}", f"--display-name={uid}", f"--access-key={access_key}",
              f"--secret-key={secret_key}"])

    def pids(self) -> dict:
        """The running daemons' PIDs by name ("osd.0": PID, ...)."""
        return {n: p for n, p in self._pids().items() if self._ours(p)}

    def command(self, prefix: str, timeout: float = 10, **args):
        """Run a mon command (``prefix`` plus its arguments) as client.admin; its JSON
        answer, or None when the cluster does not answer within ``timeout`` seconds."""
        return self._mon_command({"prefix": prefix, "format": "json", **args}, timeout)

    def _mon_command(self, cmd: dict, timeout: float):
        try:
            import rados
        except ImportError:
            rados = None
        if rados is None:
            raise Unreachable("the python3-rados bindings are not importable")
        cluster = rados.Rados(conffile=str(self.conf), name="client.admin",
                              conf={"keyring": str(self.keyring)})
        try:
            cluster.connect(timeout=int(timeout))
        except (rados.Error, OSError):
            return None
        try:
            ret, out, err = cluster.mon_command(json.dumps(cmd), b"", timeout=int(timeout))
        finally:
            cluster.shutdown()
        if ret != 0:
            raise CommandFailed([cmd["prefix"]], ret, err)
        return json.loads(out) if out.strip() else {}

    def health(self) -> dict:
        """``ceph health detail`` as JSON (``status`` and ``checks``)."""
        return self.command("health", detail="detail") or {"status": "unreachable"}

    def wait_healthy(self, timeout: float = 120) -> None:
        """Wait for HEALTH_OK with every OSD up; raise with the health checks otherwise."""
        def ok():
            osd = self.command("osd stat") or {}
            return (osd.get("num_up_osds") == OSDS
                    and (self.command("health") or {}).get("status") == "HEALTH_OK"
                    and self.command("pg stat", timeout=5) is not None)   # the mgr answers
        self._wait(ok, timeout, "HEALTH_OK")

    def _wait(self, check, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if check():
                    return
            except CommandFailed:
                pass
            dead = [n for n, p in self._pids().items() if not self._ours(p)]
            if dead:
                raise Unreachable(f"ceph dev cluster: {', '.join(dead)} exited while waiting "
                                  f"for {what}; see {self.root}/log/")
            time.sleep(0.5)
        detail = json.dumps(self.health().get("checks", {}))[:2000]
        raise Unreachable(f"ceph dev cluster: no {what} after {timeout:.0f} s: {detail}")


def _reap(pid: int, wait: bool = False) -> None:
    try:
        os.waitpid(pid, 0 if wait else os.WNOHANG)
    except ChildProcessError:
        pass


def _run(argv) -> None:
    argv = [str(a) for a in argv]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode:
        raise CommandFailed(argv, proc.returncode, proc.stderr, proc.stdout)


def main(argv=None) -> int:
    """``up DIR`` | ``down DIR`` | ``status DIR`` | ``destroy DIR``."""
    parser = argparse.ArgumentParser(prog="python -m dataplane.ceph.devcluster",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("up", "down", "status", "destroy"))
    parser.add_argument("dir")
    args = parser.parse_args(argv)
    cluster = DevCluster(args.dir)
    if args.action != "up" and not cluster._state():
        print(f"error: no development cluster in {cluster.root} (start one with 'up')",
              file=sys.stderr)
        return 1
    try:
        if args.action == "up":
            cluster.up()
            print(f"HEALTH_OK; ceph.conf: {cluster.conf}; keyring: {cluster.keyring}; "
                  f"client: {cluster.client}")
        elif args.action == "down":
            cluster.down()
        elif args.action == "destroy":
            cluster.destroy()
        else:
            print(json.dumps({"pids": cluster.pids(), "health": cluster.health()}, indent=2))
    except (CommandFailed, Unreachable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
