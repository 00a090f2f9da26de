"""What the block service adds to `strata up`: ``--iscsi-port``, ``--nbd-port``, ``--spdk`` and
its daemons.

Light imports only (this module is imported by every `strata` command); no Django. The
daemons are tgtd (iSCSI), qemu-storage-daemon (NBD, vhost-user-blk) and, when the data
directory holds an spdk pool (or with ``--spdk on``), SPDK's nvmf_tgt (the spdk driver's
engine and the NVMe-oF/TCP target; its socket is ``<data_dir>/run/spdk/spdk.sock``, where
the spdk driver looks first). They are started by `strata up`
with their state under ``<data_dir>/run/block/`` exactly as
:class:`services.block.transports.BlockRuntime` would start them, so that the plane's web
and worker processes adopt them through ``BlockRuntime.session()`` (see :func:`runtime_kwargs`)
and the bootstrap reconciles every export into them.
"""
from __future__ import annotations

import sys
from pathlib import Path

from plumbing.packages import not_installed
from plumbing.process import DaemonSpec, data_address, port_open, probe_address

DEFAULT_ISCSI_PORT = 3260
DEFAULT_NBD_PORT = 10809
DEFAULT_NVMF_PORT = 4420


def add_arguments(parser) -> None:
    """``--iscsi-port`` (3260), ``--nbd-port`` (10809), ``--nvmf-port`` (4420), ``--block-host``."""
    parser.add_argument("--iscsi-port", type=int, default=DEFAULT_ISCSI_PORT,
                        help=f"iSCSI portal port of tgtd (default {DEFAULT_ISCSI_PORT})")
    parser.add_argument("--nbd-port", type=int, default=DEFAULT_NBD_PORT,
                        help=f"NBD port of qemu-storage-daemon (default {DEFAULT_NBD_PORT})")
    parser.add_argument("--nvmf-port", type=int, default=DEFAULT_NVMF_PORT,
                        help=f"NVMe-oF/TCP port for spdk pools (default {DEFAULT_NVMF_PORT})")
    parser.add_argument("--spdk", choices=("auto", "on", "off"), default="auto",
                        help="run SPDK's nvmf_tgt for spdk pools: auto (default) when the data "
                             "directory holds an spdk pool, on (to create the first one), off")
    parser.add_argument("--block-host", default=None,
                        help="address the iSCSI portal and NBD server listen on and that "
                             "connection info names (default: --data-host, else --host; "
                             "127.0.0.1 for a wildcard)")


def block_host(options: dict) -> str:
    """The address block daemons listen on and that clients are told to connect to."""
    return probe_address(data_address(options, "block_host"))


def state_dir(data_dir: Path) -> Path:
    """``<data_dir>/run/block``: the runtime's records, sockets and daemon logs."""
    return Path(data_dir) / "run" / "block"


def runtime_kwargs(data_dir: Path, options: dict) -> dict:
    """Arguments of ``BlockRuntime(**kwargs)`` / ``BlockRuntime.session(**kwargs)``.

    Every process (strata up, web, worker) must build the runtime with the same values so
    that it adopts the running daemons instead of starting new ones.
    """
    return {"state_dir": state_dir(data_dir), "host": block_host(options),
            "iscsi_port": int(options.get("iscsi_port") or DEFAULT_ISCSI_PORT),
            "nbd_port": int(options.get("nbd_port") or DEFAULT_NBD_PORT),
            "nvmf_port": int(options.get("nvmf_port") or DEFAULT_NVMF_PORT),
            # under `strata up` the daemons are its children: sessions only adopt them
            "adopt_only": bool(options.get("supervised"))}


def _tgtd_spec(kw: dict) -> DaemonSpec:
    # not at the top: up.py is imported by every `strata` command and needs them only here
    from services.block.transports.iscsi import TgtdTarget, pick_control_port, shutdown_tgtd
    from services.block.transports.tgtadm import Tgtadm  # (same reason)

    target = TgtdTarget(kw["state_dir"] / "tgtd", portal_host=kw["host"],
                        portal_port=kw["iscsi_port"])
    if target._answers():
        # that control socket belongs to a tgtd that is still running (another appliance
        # or a crashed run): take a fresh number so we never drive someone else's tgtd
        target.control_port = pick_control_port()
        target.tgtadm = Tgtadm(target.control_port)
    target._save_record()            # the sessions of the plane find tgtd by this number
    tgtadm = target.tgtadm

    def ready() -> bool:
        return target._answers() and port_open(kw["host"], kw["iscsi_port"], 0.3)

    def stop(proc) -> None:
        shutdown_tgtd(tgtadm)        # tgtd ignores SIGTERM

    argv = ["tgtd", "-f", "-C", str(target.control_port),
            "--iscsi", f"portal={kw['host']}:{kw['iscsi_port']}"]
    # a new tgtd has no targets: the block service re-applies every export after a restart
    return DaemonSpec(name="tgtd", argv=argv, ready=ready, stop=stop, reconcile="block")


def _qsd_spec(kw: dict) -> DaemonSpec:
    qsd_dir = kw["state_dir"] / "qsd"
    (qsd_dir / "vhost").mkdir(parents=True, exist_ok=True)
    qmp = qsd_dir / "qsd-qmp.sock"
    qmp.unlink(missing_ok=True)      # a socket left by an earlier run answers nobody
    argv = ["qemu-storage-daemon",
            "--chardev", f"socket,path={qmp},server=on,wait=off,id=qmp0",
            "--monitor", "chardev=qmp0",
            "--nbd-server", f"addr.type=inet,addr.host={kw['host']},addr.port={kw['nbd_port']}"]

    def ready() -> bool:
        return qmp.exists() and port_open(kw["host"], kw["nbd_port"], 0.3)

    def prepare() -> None:
        qmp.unlink(missing_ok=True)  # left by the daemon that died: the ready check needs a new one

    # qemu-storage-daemon quits cleanly on SIGTERM (the supervisor's default stop); a new one
    # has no exports: the block service re-applies them after a restart
    return DaemonSpec(name="qemu-storage-daemon", argv=argv, ready=ready, prepare=prepare,
                      reconcile="block")


def _nvmf_tgt_spec(data_dir: Path) -> DaemonSpec:
    from dataplane.spdk.target import SpdkTarget, target_dir   # (same reason)

    target = SpdkTarget(target_dir(data_dir))
    target.prepare()

    def ready() -> bool:
        if not target.ready():
            return False
        target.record_pid()          # so that the next prepare() cleans up after it
        return True

    def stop(proc) -> None:          # SIGTERM, then DPDK's run directory of that process
        target.stop_process(proc)

    # a new nvmf_tgt holds no pools or subsystems: the block service's reconcile brings the
    # spdk pools back (their lvol stores load from the devices) and then every NVMe-oF export
    return DaemonSpec(name="nvmf_tgt", argv=target.argv(), ready=ready, stop=stop,
                      prepare=target.prepare, reconcile="block")


def wants_spdk(data_dir: Path, options: dict) -> bool:
    """Whether `strata up` runs nvmf_tgt: ``--spdk on``, or ``auto`` and an spdk pool exists."""
    from dataplane.spdk.target import has_spdk_pools   # (same reason)

    choice = options.get("spdk") or "auto"
    return choice == "on" or (choice == "auto" and has_spdk_pools(data_dir))


def daemons(data_dir: Path, options: dict) -> list[DaemonSpec]:
    """tgtd and qemu-storage-daemon; the bootstrap then re-applies every export into them.

    A daemon whose program is not installed is left out with a warning (the rest of the
    appliance still runs; block exports of that protocol answer 503 saying what is missing).
    """
    kw = runtime_kwargs(data_dir, options)
    kw["state_dir"].mkdir(parents=True, exist_ok=True)
    specs = []
    for programs, make in ((("tgtd", "tgtadm"), _tgtd_spec),
                           (("qemu-storage-daemon",), _qsd_spec)):
        why = not_installed(*programs)
        if why:
            print(f"strata up: {why}; block exports over it are unavailable", file=sys.stderr,
                  flush=True)
        else:
            specs.append(make(kw))
    if wants_spdk(data_dir, options):
        from dataplane.spdk.target import spdk_unavailable   # (same reason)

        why = spdk_unavailable()
        if why:
            print(f"strata up: {why}; spdk pools are unavailable", file=sys.stderr, flush=True)
        else:
            specs.append(_nvmf_tgt_spec(data_dir))
    return specs
