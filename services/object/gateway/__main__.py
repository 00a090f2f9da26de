"""``python -m services.object.gateway --config CONFIG.json --host 127.0.0.1 --port 9000
[--ssl-certfile CERT --ssl-keyfile KEY]``."""
from __future__ import annotations

import argparse
import logging
import resource
import sys

import uvicorn

from .app import create_app
from .config import ConfigError, ConfigWatcher
from .httpproto import GatewayHttpProtocol


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, check the config, and serve until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(prog="python -m services.object.gateway",
                                     description="Strata S3-compatible gateway")
    parser.add_argument("--config", required=True, help="JSON config written by the management plane")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--log-level", default="warning")
    parser.add_argument("--ssl-certfile", default=None, help="serve HTTPS (S3 over TLS)")
    parser.add_argument("--ssl-keyfile", default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        ConfigWatcher(args.config)
    except (OSError, ConfigError) as exc:
        print(f"strata-s3: cannot use config {args.config}: {exc}", file=sys.stderr)
        return 2
    # every bucket holds a few SQLite connections per index shard: allow as many files as we may
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    # worker threads (fsync, SQLite commits, hashing) must not hold the event loop off for 5 ms
    sys.setswitchinterval(0.0005)
    uvicorn.run(create_app(args.config), host=args.host, port=args.port, loop="uvloop", http=GatewayHttpProtocol,
                lifespan="on", log_level=args.log_level, access_log=False, timeout_keep_alive=30,
                backlog=2048, ssl_certfile=args.ssl_certfile, ssl_keyfile=args.ssl_keyfile,
                server_header=False)  # the app says "Server: Strata"
    return 0


if __name__ == "__main__":
    sys.exit(main())
