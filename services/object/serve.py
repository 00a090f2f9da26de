"""Launch the S3 gateway once the plane has given it a data root (no Django).

``strata up`` starts its daemons before the plane's bootstrap, but the gateway's data root is
a file system on a dataplane pool that only the bootstrap mounts (and, on the first start,
creates), and the gateway fixes its data root when it starts. So ``strata up`` runs this
launcher instead: it writes ``run/s3/waiting`` (the ready check), waits until the bootstrap
has written the real config and the ``run/s3/start`` gate naming the same data root, which
must be an existing directory, then replaces itself (``exec``, same PID) with::

    python -m services.object.gateway --config CONFIG --host HOST --port PORT [--workers N]

    python -m services.object.serve --data-dir DIR --host 127.0.0.1 --port 9000 \
        [--workers N] [--ssl-certfile CERT --ssl-keyfile KEY]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path

from services.object import gatewayconf

POLL_SECONDS = 0.2


def _gate_open(data_dir: Path) -> bool:
    try:
        gate = json.loads(gatewayconf.gate_path(data_dir).read_text())
    except (OSError, ValueError):
        return False
    config = gatewayconf.read_config(gatewayconf.config_path(data_dir)) or {}
    root = config.get("data_root")
    return bool(root) and root == gate.get("data_root") and os.path.isdir(root)


def main(argv: list[str] | None = None) -> int:
    """Wait for the gate, then exec the gateway."""
    parser = argparse.ArgumentParser(prog="python -m services.object.serve",
                                     description="Start the S3 gateway when the plane opens the gate")
    parser.add_argument("--data-dir", required=True, type=Path)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--workers", type=int, default=None,
                        help="gateway worker processes (default: the gateway's, the number of cores)")
    parser.add_argument("--log-level", default="warning")
    parser.add_argument("--ssl-certfile", default=None, help="serve HTTPS with this certificate")
    parser.add_argument("--ssl-keyfile", default=None)
    args = parser.parse_args(argv)
    data_dir = args.data_dir.resolve()
    try:  # fail now, with a message, rather than after the bootstrap
        with socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((args.host, args.port))
    except OSError as exc:
        print(f"strata-s3: cannot listen on {args.host}:{args.port} ({exc.strerror}); "
              "choose another port with `strata up --s3-port`", file=sys.stderr, flush=True)
        return 2
    waiting = gatewayconf.waiting_path(data_dir)
    waiting.parent.mkdir(parents=True, exist_ok=True)
    waiting.write_text(f"{os.getpid()}\n")
    print(f"strata-s3: waiting for the plane to assign the data root ({gatewayconf.gate_path(data_dir)})",
          flush=True)
    while not _gate_open(data_dir):
        time.sleep(POLL_SECONDS)
    config = gatewayconf.config_path(data_dir)
    print(f"strata-s3: starting the gateway on {args.host}:{args.port} with {config}", flush=True)
    argv = [sys.executable, "-m", "services.object.gateway", "--config", str(config),
            "--host", args.host, "--port", str(args.port), "--log-level", args.log_level]
    if args.workers:
        argv += ["--workers", str(args.workers)]
    if args.ssl_certfile:
        argv += ["--ssl-certfile", args.ssl_certfile, "--ssl-keyfile", args.ssl_keyfile]
    os.execv(sys.executable, argv)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
