"""HTTP client of a peer appliance's replica-transfer API (no Django; `requests` only).

A transfer is a session on the peer: ``begin`` opens it, ``put`` appends the next chunk of
the send stream at the offset the peer has (so a cut link resumes where it stopped),
``commit`` hands the peer the stream's length and SHA-256; only then does the peer apply it
with ``receive_snapshot``, so a replica never sees half a stream.
"""
import requests

TIMEOUT = (10, 600)  # connect, read (a commit applies the whole stream before answering)


class PeerError(Exception):
    """The peer could not be reached or refused a request; ``status`` is its HTTP status
    (None when it was not reached)."""

    def __init__(self, message: str, status=None, body=None):
        super().__init__(message)
        self.status = status
        self.body = body or {}


class PeerClient:
    """Calls ``<url>/api/v1/...`` on a peer with ``Authorization: Token <token>``."""

    def __init__(self, url: str, token: str):
        self.base = url.rstrip("/") + "/api/v1"
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Token {token}"

    def _call(self, method: str, path: str, ok=(200, 201, 204), **kwargs):
        try:
            r = self.session.request(method, self.base + path, timeout=TIMEOUT, **kwargs)
        except requests.RequestException as exc:
            raise PeerError(f"peer {self.base} unreachable: {exc}") from exc
        try:
            body = r.json() if r.content else {}
        except ValueError:
            body = {"detail": r.text[:300]}
        if r.status_code not in ok:
            detail = body.get("detail", body) if isinstance(body, dict) else body
            raise PeerError(f"peer answered {r.status_code} to {method} {path}: {detail}",
                            r.status_code, body)
        return body

    def whoami(self) -> dict:
        """The peer's view of our token: ``{"username", "role", ...}``."""
        return self._call("GET", "/me/")

    def replica(self, name: str):
        """The peer's replica ``name`` (its snapshots, oldest first), or None."""
        try:
            return self._call("GET", f"/replicas/{name}/")
        except PeerError as exc:
            if exc.status == 404:
                return None
            raise

    def begin(self, **fields) -> dict:
        """Open a transfer: kind, pool, name, snapshot, parent, source."""
        return self._call("POST", "/replica-transfers/", json=fields)

    def transfer(self, transfer_id: str):
        """A transfer's state (``received`` bytes) or None if the peer dropped it."""
        try:
            return self._call("GET", f"/replica-transfers/{transfer_id}/")
        except PeerError as exc:
            if exc.status == 404:
                return None
            raise

    def put(self, transfer_id: str, offset: int, data: bytes) -> dict:
        """Append ``data`` at ``offset`` (must be what the peer has received so far)."""
        return self._call("PUT", f"/replica-transfers/{transfer_id}/data/",
                          params={"offset": offset}, data=data,
                          headers={"Content-Type": "application/octet-stream"})

    def commit(self, transfer_id: str, *, size: int, sha256: str) -> dict:
        """Ask the peer to check the stream and apply it; returns the received snapshot."""
        return self._call("POST", f"/replica-transfers/{transfer_id}/commit/",
                          json={"bytes": size, "sha256": sha256})

    def discard(self, transfer_id: str) -> None:
        self._call("DELETE", f"/replica-transfers/{transfer_id}/", ok=(204, 404))
