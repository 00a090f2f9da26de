"""A forwarding HTTP proxy that passes only the Debian mirrors of the host's apt sources.

The cluster tests' nodes have no route off their bridge; apt inside them points
``Acquire::http::Proxy`` at this proxy on the bridge's host address, so a role's apt task can
still fetch a package the cached root lacks, and nothing else leaves the bridge.
"""
from __future__ import annotations

import glob
import http.client
import re
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


def mirror_hosts() -> set[str]:
    """The host names of the http(s) URIs in the host's apt sources."""
    hosts = set()
    for path in glob.glob("/etc/apt/sources.list.d/*") + ["/etc/apt/sources.list"]:
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            continue
        for url in re.findall(r"^(?:URIs:|deb)\s+(?:\[[^]]*\]\s+)?(https?://\S+)", text, re.M):
            hosts.add(urlsplit(url).hostname)
    return hosts or {"deb.debian.org"}


class _Handler(BaseHTTPRequestHandler):
    allowed: set[str] = set()

    def log_message(self, *args):   # quiet: apt's requests are not the test's output
        pass

    def do_GET(self):
        url = urlsplit(self.path)
        if url.scheme != "http" or url.hostname not in self.allowed:
            self.send_error(403, f"only {', '.join(sorted(self.allowed))} pass this proxy")
            return
        conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=60)
        try:
            path = url.path + (f"?{url.query}" if url.query else "")
            conn.request("GET", path, headers={k: v for k, v in self.headers.items()
                                               if k.lower() not in ("proxy-connection", "host")})
            resp = conn.getresponse()
            self.send_response(resp.status)
            for key, value in resp.getheaders():
                if key.lower() not in ("connection", "transfer-encoding"):
                    self.send_header(key, value)
            self.send_header("Connection", "close")
            self.end_headers()
            shutil.copyfileobj(resp, self.wfile)
        except OSError as exc:
            self.send_error(502, str(exc))
        finally:
            conn.close()

    def do_CONNECT(self):
        self.send_error(403, "no tunnels through this proxy")


class AptProxy:
    """The proxy on ``address:port`` in a thread of the test process; ``close()`` stops it."""

    def __init__(self, address: str, port: int = 3142):
        handler = type("Handler", (_Handler,), {"allowed": mirror_hosts()})
        self.server = ThreadingHTTPServer((address, port), handler)
        self.server.daemon_threads = True
        self.url = f"http://{address}:{port}/"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
