"""What the file service adds to `strata up`: ganesha.nfsd and smbd (no Django here).

Options: ``--nfs-port`` (default 2049), ``--smb-port`` (default 445), ``--file-bind`` (the
address both listen on; default `strata up`'s ``--host``; 0.0.0.0 for every interface). Both daemons start with the config the
plane last applied (``<data_dir>/run/{nfs,smb}/served.json``; empty on first start), and the
bootstrap then reconciles every export, share and user into them. A daemon that is not
installed is left out with a message (its rows stay ``pending``) so the rest of Strata runs.
"""
from pathlib import Path

from plumbing.process import DaemonSpec, terminate
from plumbing.workclass import SAMPLES

STOP_TIMEOUT = 15.0      # SIGTERM, then SIGKILL


def add_arguments(parser) -> None:
    """Options of `strata up` for the file service."""
    parser.add_argument("--nfs-port", type=int, default=2049,
                        help="TCP port of the NFSv4 server (ganesha.nfsd); default 2049")
    parser.add_argument("--smb-port", type=int, default=445,
                        help="TCP port of the SMB3 server (smbd); default 445")
    parser.add_argument("--file-bind", default="",
                        help="address NFS and SMB listen on (default: --data-host, else --host; 0.0.0.0 for "
                             "every interface)")


def daemons(data_dir: Path, options: dict) -> list:
    """ganesha.nfsd and smbd, each with a ready check, state under ``<data_dir>/run/``."""
    import sys

    # not at the top: up.py is imported by every `strata` command and needs them only here
    from services.file.daemons import nfs_server, smb_server
    from services.file.runtime import DaemonStartError  # (same reason)

    nfs, smb = nfs_server(data_dir, options), smb_server(data_dir, options)

    def stop_smb(proc):
        terminate(proc, STOP_TIMEOUT)

    def stop_nfs(proc):
        terminate(proc, STOP_TIMEOUT)
        nfs.unbind_all()     # the btrfs binds made for Ganesha would keep pools busy

    specs = []
    for server, name, stop in ((nfs, "ganesha", stop_nfs), (smb, "smbd", stop_smb)):
        try:
            argv = server.argv()
        except DaemonStartError as exc:   # not installed: the rest of Strata still runs
            print(f"strata up: file service: {exc}; {name} not started", file=sys.stderr)
            continue
        server.prepare()
        # started again after a crash with the config last applied, then reconciled. One
        # process serves every export and share, of both foreground classes: it runs in the
        # samples group (sample reads are what must not starve); saves through it get the
        # same weight, since the kernel cannot split one process's threads by client
        specs.append(DaemonSpec(name=name, argv=argv, ready=server.ready, stop=stop,
                                prepare=server.prepare, reconcile="file", work_class=SAMPLES))
    return specs
