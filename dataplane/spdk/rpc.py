"""The spdk driver's JSON-RPC caller: SPDK's own ``JSONRPCClient``, with errors made specific.

Every reply is checked: a JSON-RPC error becomes the dataplane error that fits its code
(-19 ENODEV -> NotFound, -17 EEXIST -> AlreadyExists, -16 EBUSY -> InUse, ...); a reply
that is not a JSON-RPC response for our request (garbage, wrong id, no result, hang-up,
timeout) becomes :class:`SpdkRpcError` naming the method, the socket and what was wrong.
"""

from __future__ import annotations

import errno
import logging
import threading

from ..errors import (
    AlreadyExists,
    CommandFailed,
    DataplaneError,
    InUse,
    InvalidArgument,
    NotFound,
    Unreachable,
    Unsupported,
)

try:  # the ``spdk`` PyPI package (pinned in pyproject.toml)
    from spdk.rpc.client import JSONRPCClient, JSONRPCException
except ImportError:  # pragma: no cover - reported when the driver is used
    JSONRPCClient = None
    JSONRPCException = Exception


class SpdkRpcError(CommandFailed):
    """spdk_tgt failed a call or sent something that is not a valid reply."""

    def __init__(self, method: str, message: str, code: int | None = None):
        DataplaneError.__init__(self, message)
        self.argv = ["spdk-rpc", method]
        self.returncode = code if code is not None else -1
        self.stderr = message
        self.stdout = ""
        self.method = method
        self.rpc_code = code


class SpdkUnreachable(SpdkRpcError, Unreachable):
    """spdk_tgt does not answer on its RPC socket (the API answers 503)."""

    code = "unavailable"


_ERRNO_CLASSES = {
    errno.ENODEV: NotFound, errno.ENOENT: NotFound,
    errno.EEXIST: AlreadyExists,
    errno.EBUSY: InUse, errno.EPERM: InUse,
    errno.EINVAL: InvalidArgument, errno.ENOSPC: InvalidArgument,
    errno.ENOTSUP: Unsupported, errno.EOPNOTSUPP: Unsupported,
}


def error_for(method: str, code, message: str) -> DataplaneError:
    """The dataplane error for an SPDK error reply to ``method``."""
    text = f"spdk_tgt refused {method}: {message} (code {code})"
    if code == -32601:
        return Unsupported(f"spdk_tgt does not know the RPC {method} (too old an SPDK, or "
                           "the module is not built in)")
    if code == -32602:
        return InvalidArgument(text)
    if isinstance(code, int) and code < 0 and -code in _ERRNO_CLASSES:
        if -code == errno.ENOSPC:
            return InvalidArgument(f"{text}: the lvol store has no free clusters left")
        return _ERRNO_CLASSES[-code](text)
    return SpdkRpcError(method, text, code if isinstance(code, int) else None)


class SpdkRpc:
    """One connection to spdk_tgt's RPC socket, re-opened after any transport failure."""

    def __init__(self, address: str, port: int | None = None, timeout: float = 30.0):
        self.address = address
        self.port = port
        self.timeout = timeout
        self._client = None
        self._lock = threading.Lock()

    def _connect(self):
        if JSONRPCClient is None:
            raise Unsupported("the spdk Python package is not installed (pip install spdk)")
        try:
            client = JSONRPCClient(self.address, self.port, timeout=self.timeout)
        except JSONRPCException as exc:
            raise SpdkUnreachable("connect", f"cannot reach spdk_tgt at {self.address}: is it "
                               f"running? (`strata up --spdk on` runs SPDK's nvmf_tgt; "
                               f"{_text(exc)})") from exc
        lg = client.get_logger()     # the client adds a handler per instance; keep one
        while len(lg.handlers) > 1:
            lg.removeHandler(lg.handlers[-1])
        lg.setLevel(logging.CRITICAL)
        return client

    def close(self) -> None:
        """Close the connection (the next call opens a new one)."""
        if self._client is not None:
            try:
                self._client.close()
            except OSError:
                pass
            self._client = None

    def call(self, method: str, **params):
        """Call ``method`` with ``params`` (None values dropped); return its result."""
        params = {k: v for k, v in params.items() if v is not None}
        with self._lock:
            if self._client is None:
                self._client = self._connect()
            try:
                req_id = self._client.send(method, params)
                reply = self._client.recv()
            except (JSONRPCException, OSError, ValueError) as exc:
                self.close()
                raise SpdkRpcError(method, f"no valid reply from spdk_tgt at {self.address} "
                                   f"to {method}: {_text(exc)}") from exc
        if not isinstance(reply, dict) or reply.get("jsonrpc") != "2.0":
            self.close()
            raise SpdkRpcError(method, f"malformed reply from spdk_tgt to {method}: "
                               f"{str(reply)[:200]!r} is not a JSON-RPC 2.0 response")
        if reply.get("id") != req_id:
            self.close()    # the stream is out of step; start again
            raise SpdkRpcError(method, f"spdk_tgt answered request {reply.get('id')!r} "
                               f"while {method} was request {req_id}")
        if "error" in reply:
            err = reply["error"]
            if not isinstance(err, dict):
                raise SpdkRpcError(method, f"malformed error reply to {method}: {err!r}")
            raise error_for(method, err.get("code"), str(err.get("message", "")))
        if "result" not in reply:
            raise SpdkRpcError(method, f"malformed reply from spdk_tgt to {method}: "
                               f"no 'result' in {str(reply)[:200]}")
        return reply["result"]


def _text(exc: Exception) -> str:
    return " ".join(str(getattr(exc, "message", exc)).split())[:300]
