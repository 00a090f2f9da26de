"""What the object service adds to `strata up`: ``--s3-port``, ``--s3-workers`` and the S3 gateway daemon.

Light imports only (this module is imported by every `strata` command). The daemon is the
launcher :mod:`services.object.serve`, which becomes the gateway once the plane's bootstrap
has mounted the data root and written the config (see :mod:`services.object.gatewayconf`).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from plumbing.process import DaemonSpec, data_address, port_open, probe_address
from plumbing.workclass import SAMPLES
from services.object import gatewayconf

DEFAULT_S3_PORT = 9000
REPO = Path(__file__).resolve().parent.parent.parent


def add_arguments(parser) -> None:
    """``--s3-port`` (default 9000), ``--s3-workers`` (default: the cores), ``--s3-host``
    (default: ``--host``), ``--s3-endpoint``, ``--s3-domain``, ``--s3-pool``."""
    parser.add_argument("--s3-port", type=int, default=DEFAULT_S3_PORT,
                        help=f"port of the S3 gateway (default {DEFAULT_S3_PORT})")
    parser.add_argument("--s3-workers", type=int, default=None,
                        help="S3 gateway worker processes sharing the port (default: the number of "
                             "cores; 1: one process)")
    parser.add_argument("--s3-host", default=None,
                        help="address the S3 gateway listens on (default: --data-host, else --host)")
    parser.add_argument("--s3-endpoint", default=None,
                        help="S3 URL given to users in credentials.json and the API "
                             "(default: http://HOST:S3_PORT, https with --tls)")
    parser.add_argument("--s3-domain", action="append", dest="s3_domains", default=None,
                        help="domain for virtual-host-style bucket addressing "
                             "(<bucket>.DOMAIN; repeatable; default: localhost)")
    parser.add_argument("--s3-pool", default=None,
                        help="pool that keeps the gateway's data (its file system 's3', made "
                             "on the first start), e.g. a ceph pool so that buckets survive "
                             "the loss of an OSD (default: the pool named default); "
                             "S3 waits while the pool does not exist")
    add_store_argument(parser)


def add_store_argument(parser) -> None:
    """``--s3-store file|rados`` (`strata up` and `strata plane`)."""
    parser.add_argument("--s3-store", choices=("file", "rados"), default="file",
                        help="where buckets are kept: 'file' (default), files in the S3 "
                             "pool's file system, one gateway; 'rados', the --s3-pool Ceph "
                             "pool's RADOS pool, shared by the gateway of every cluster node "
                             "assigned 'object' (some S3 features are not supported on it: "
                             "see services/object/README.md)")


def s3_address(options: dict) -> tuple[str, int]:
    """(host to listen on, port) of the gateway from `strata up`'s options."""
    host = data_address(options, "s3_host")
    return host, int(options.get("s3_port") or DEFAULT_S3_PORT)


def daemons(data_dir: Path, options: dict) -> list[DaemonSpec]:
    """The gateway launcher, with the config the plane last rendered (a valid empty one on the
    first start)."""
    data_dir = Path(data_dir)
    host, port = s3_address(options)
    config = gatewayconf.config_path(data_dir)
    if gatewayconf.read_config(config) is None:
        with gatewayconf.locked(config):
            gatewayconf.write_config(config, gatewayconf.placeholder_config(data_dir))
    # the gate and the ready marker of a previous run mean nothing now: the pool holding the
    # data root is mounted again only by this run's bootstrap
    gatewayconf.gate_path(data_dir).unlink(missing_ok=True)
    waiting = gatewayconf.waiting_path(data_dir)
    waiting.unlink(missing_ok=True)
    gatewayconf.workers_path(data_dir).unlink(missing_ok=True)  # the previous run's workers
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    argv = [sys.executable, "-m", "services.object.serve", "--data-dir", str(data_dir),
            "--host", host, "--port", str(port)]
    if options.get("s3_workers"):
        argv += ["--workers", str(int(options["s3_workers"]))]
    if options.get("tls_cert"):  # `strata up --tls`: S3 over HTTPS with the appliance's certificate
        argv += ["--ssl-certfile", options["tls_cert"], "--ssl-keyfile", options["tls_key"]]
    gate = gatewayconf.gate_path(data_dir)

    def ready() -> bool:
        # at the first start the launcher waits for the bootstrap's gate; started again (the
        # gate is open) it becomes the gateway at once: ready once that answers
        return waiting.exists() and (not gate.exists() or port_open(probe_address(host), port))

    # its workers serve both foreground classes: they run in the samples group, and the
    # gateway orders requests by class itself (gateway/admission.py)
    return [DaemonSpec(name="s3", argv=argv, env={"PYTHONPATH": pythonpath}, ready=ready,
                       work_class=SAMPLES)]
