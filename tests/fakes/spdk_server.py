"""A FAKE spdk_tgt: SPDK's JSON-RPC 2.0 over a unix socket, with state but no data path.

THIS IS A FAKE, NOT SPDK. Strata's ``spdk`` driver is tested on a real nvmf_tgt
(tests/spdk_support.py); this server remains only for the faults a real target cannot be
made to produce on demand (tests/test_spdk_rpc_faults.py names each): chosen error codes,
malformed replies, a PCIe NVMe device.

What it does like SPDK: accepts JSON-RPC requests (one JSON value after another on the
stream, no delimiter needed), answers ``{"jsonrpc": "2.0", "id": N, "result": ...}`` or
``{"jsonrpc": "2.0", "id": N, "error": {"code": C, "message": M}}`` with SPDK's codes
(-19 "No such device", -17 "File exists", -16 "Device or resource busy", -28 "No space
left on device", -32601 "Method not found", -32602 "Invalid parameters", ...), and
keeps bdevs, lvol stores, lvols with snapshot/clone relations, QoS limits and nvmf
subsystems the way SPDK does (see spdk_state.py and spdk_nvmf.py).

For tests it also records every call (``server.calls``) and can be told to misbehave
on the next call of a method (``server.inject``): send an error, a malformed reply,
a reply with the wrong id, garbage bytes, or hang up.

Run alone: ``python -m tests.fakes.spdk_server --socket /tmp/spdk.sock
[--nvme 0000:01:00.0=8G]``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import socketserver
import threading

from .spdk_nvmf import NvmfRpcs
from .spdk_state import RpcError, SpdkState


class FakeSpdk(SpdkState, NvmfRpcs):
    """The fake target's whole state: bdevs, lvol stores, lvols, nvmf."""

    def rpc_spdk_get_version(self):
        return {"version": "SPDK v24.09 (FAKE: tests/fakes/spdk_server.py)",
                "fields": {"major": 24, "minor": 9, "patch": 0, "suffix": "-fake"}}

    def rpc_rpc_get_methods(self, current=False, include_aliases=False):
        return sorted(n[4:] for n in dir(self) if n.startswith("rpc_"))


class _Handler(socketserver.BaseRequestHandler):
    def handle(self):
        server: FakeSpdkServer = self.server.owner
        decoder = json.JSONDecoder()
        buf = ""
        while True:
            try:
                chunk = self.request.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            buf += chunk.decode("utf-8", errors="replace")
            while True:
                stripped = buf.lstrip()
                if not stripped:
                    buf = ""
                    break
                try:
                    req, end = decoder.raw_decode(stripped)
                except ValueError:
                    if len(stripped) > (1 << 20):
                        self._send({"jsonrpc": "2.0", "id": None,
                                    "error": {"code": -32700, "message": "Parse error"}})
                        return
                    buf = stripped
                    break
                buf = stripped[end:]
                if not server.answer(self.request, req, self._send):
                    return

    def _send(self, obj) -> None:
        self.request.sendall(json.dumps(obj).encode())


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = True


class FakeSpdkServer:
    """Serve a :class:`FakeSpdk` on a unix socket in a background thread.

    ``with FakeSpdkServer(path) as srv:`` starts and stops it; ``srv.state`` is the
    model (keep it to "restart" the target with the same devices), ``srv.calls`` the
    (method, params) log.
    """

    def __init__(self, socket_path: str, state: FakeSpdk | None = None,
                 nvme_devices: dict[str, int] | None = None):
        self.socket_path = str(socket_path)
        self.state = state or FakeSpdk(nvme_devices)
        self.calls: list[tuple[str, dict]] = []
        self._faults: dict[str, list[dict]] = {}
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> "FakeSpdkServer":
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        self._server = _Server(self.socket_path, _Handler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def inject(self, method: str, *, error: tuple[int, str] | None = None,
               result=None, raw: bytes | None = None, wrong_id: bool = False,
               hang_up: bool = False) -> None:
        """Make the next call of ``method`` fail in the given way (one fault per call)."""
        fault = {"error": error, "result": result, "raw": raw, "wrong_id": wrong_id,
                 "hang_up": hang_up}
        with self._lock:
            self._faults.setdefault(method, []).append(fault)

    def methods(self) -> list[str]:
        return self.state.rpc_rpc_get_methods()

    def answer(self, conn: socket.socket, req, send) -> bool:
        """Answer one request; return False when the connection must be closed."""
        if not isinstance(req, dict) or req.get("jsonrpc") != "2.0" \
                or not isinstance(req.get("method"), str):
            send({"jsonrpc": "2.0", "id": req.get("id") if isinstance(req, dict) else None,
                  "error": {"code": -32600, "message": "Invalid request"}})
            return True
        method, rid = req["method"], req.get("id")
        params = req.get("params", {})
        with self._lock:
            self.calls.append((method, params))
            faults = self._faults.get(method)
            fault = faults.pop(0) if faults else None
        if fault is not None:
            if fault["raw"] is not None:
                conn.sendall(fault["raw"])
                conn.shutdown(socket.SHUT_RDWR)
                return False
            if fault["hang_up"]:
                conn.shutdown(socket.SHUT_RDWR)
                return False
            if fault["error"] is not None:
                code, message = fault["error"]
                send({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}})
                return True
            if fault["wrong_id"]:
                send({"jsonrpc": "2.0", "id": (rid or 0) + 1000, "result": True})
                return True
            send({"jsonrpc": "2.0", "id": rid, "bogus": fault["result"]})
            return True
        fn = getattr(self.state, "rpc_" + method, None)
        if fn is None:
            send({"jsonrpc": "2.0", "id": rid,
                  "error": {"code": -32601, "message": "Method not found"}})
            return True
        if not isinstance(params, dict):
            send({"jsonrpc": "2.0", "id": rid,
                  "error": {"code": -32602, "message": "Invalid parameters"}})
            return True
        try:
            with self._lock:
                result = fn(**params)
        except RpcError as exc:
            send({"jsonrpc": "2.0", "id": rid,
                  "error": {"code": exc.code, "message": exc.message}})
            return True
        except (TypeError, KeyError, ValueError, AttributeError):
            send({"jsonrpc": "2.0", "id": rid,
                  "error": {"code": -32602, "message": "Invalid parameters"}})
            return True
        send({"jsonrpc": "2.0", "id": rid, "result": result})
        return True


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def main(argv=None) -> None:
    """Run the fake in the foreground until interrupted."""
    ap = argparse.ArgumentParser(description="FAKE spdk_tgt JSON-RPC server (tests only)")
    ap.add_argument("--socket", default="/var/tmp/spdk.sock")
    ap.add_argument("--nvme", action="append", default=[],
                    help="a fake PCIe NVMe drive: TRADDR=SIZE, e.g. 0000:01:00.0=8G")
    args = ap.parse_args(argv)
    nvme = {k: _size(v) for k, v in (item.split("=", 1) for item in args.nvme)}
    srv = FakeSpdkServer(args.socket, nvme_devices=nvme).start()
    print(f"FAKE spdk_tgt listening on {args.socket}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
