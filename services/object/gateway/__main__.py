"""``python -m services.object.gateway --config CONFIG.json --host 127.0.0.1 --port 9000
[--workers N] [--ssl-certfile CERT --ssl-keyfile KEY]``.

``--workers`` (default: the number of cores) worker processes serve the one port (see
:mod:`.workers`); 1 serves in this process alone."""
from __future__ import annotations

import argparse
import logging
import os
import resource
import socket
import sys

import uvicorn

from .app import create_app
from .config import ConfigError, ConfigWatcher, http_settings
from .core import WorkerRole
from .httpproto import GatewayHttpProtocol
from .workers import Supervisor, die_with_parent


def default_workers() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return os.cpu_count() or 1


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, check the config, and serve until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="python -m services.object.gateway",
                                     description="Strata S3-compatible gateway")
    parser.add_argument("--config", required=True, help="JSON config written by the management plane")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--workers", type=int, default=None,
                        help="worker processes serving the port (default: the number of cores; "
                             "1: this process serves alone)")
    parser.add_argument("--log-level", default="warning")
    parser.add_argument("--ssl-certfile", default=None, help="serve HTTPS (S3 over TLS)")
    parser.add_argument("--ssl-keyfile", default=None)
    # set by the parent of --workers N for each worker (see .workers)
    parser.add_argument("--worker-fd", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker-slot", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--started", type=float, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    workers = default_workers() if args.workers is None else args.workers
    if workers < 1:
        parser.error("--workers must be at least 1")
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        limits, keep_alive = http_settings(ConfigWatcher(args.config).config)
    except (OSError, ConfigError) as exc:
        print(f"strata-s3: cannot use config {args.config}: {exc}", file=sys.stderr)
        return 2
    # every bucket holds a few SQLite connections per index shard: allow as many files as we may
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    tls = ["--ssl-certfile", args.ssl_certfile, "--ssl-keyfile", args.ssl_keyfile] if args.ssl_certfile else []
    if args.worker_fd is None and workers > 1:
        try:
            supervisor = Supervisor(args.config, args.host, args.port, workers,
                                    ["--workers", str(workers), "--log-level", args.log_level, *tls])
        except OSError as exc:
            print(f"strata-s3: cannot listen on {args.host}:{args.port}: {exc.strerror}", file=sys.stderr)
            return 1
        return supervisor.run()
    # worker threads (fsync, SQLite commits, hashing) must not hold the event loop off for 5 ms
    sys.setswitchinterval(0.0005)
    role = None
    if args.worker_fd is not None:
        die_with_parent()
        role = WorkerRole(slot=args.worker_slot, started=args.started, workers=workers)
    config = uvicorn.Config(create_app(args.config, role), host=args.host, port=args.port, loop="uvloop",
                            http=GatewayHttpProtocol.with_limits(limits), lifespan="on",
                            log_level=args.log_level, access_log=False, timeout_keep_alive=keep_alive,
                            backlog=2048, ssl_certfile=args.ssl_certfile, ssl_keyfile=args.ssl_keyfile,
                            server_header=False,  # the app says "Server: Strata"
                            # the peer's address and TLS are facts: X-Forwarded-For/-Proto from a
                            # local client must not set aws:SourceIp or aws:SecureTransport
                            proxy_headers=False)
    server = uvicorn.Server(config)
    if args.worker_fd is None:
        server.run()
    else:
        server.run(sockets=[socket.socket(fileno=args.worker_fd)])
    return 0 if server.started else 3


if __name__ == "__main__":
    sys.exit(main())
