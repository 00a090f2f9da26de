"""HTTP client of a peer appliance's replica-transfer API (no Django: `requests` and
``plumbing.restclient``).

A transfer is a session on the peer: ``begin`` opens it, ``put`` appends the next chunk of
the send stream at the offset the peer has (so a cut link resumes where it stopped),
``commit`` hands the peer the stream's length and SHA-256; only then does the peer apply it
with ``receive_snapshot``, so a replica never sees half a stream.
"""
import hashlib

import requests

from plumbing.restclient import ApiError, RestClient

TIMEOUT = (10, 600)  # connect, read (a commit applies the whole stream before answering)
# A failback stream ends with this and the SHA-256 (hex) of the whole send stream, so the
# puller can check a stream it got in pieces (resumed at an offset) before applying it.
TRAILER_MAGIC = b"STRATA-SHA256:"
TRAILER_LEN = len(TRAILER_MAGIC) + 64


def with_trailer(stream, offset: int = 0):
    """``stream`` from byte ``offset`` on, then the trailer (the digest covers it all)."""
    digest, pos = hashlib.sha256(), 0
    try:
        for chunk in stream:
            digest.update(chunk)
            start, pos = pos, pos + len(chunk)
            if pos > offset:
                yield chunk[max(0, offset - start):]
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()  # a dropped client stops `btrfs send` now
    if pos < offset:
        raise ValueError(f"the stream has {pos} bytes, fewer than the offset {offset}")
    yield TRAILER_MAGIC + digest.hexdigest().encode()


class PeerError(ApiError):
    """The peer could not be reached or refused a request; ``status`` is its HTTP status
    (None when it was not reached), ``body`` its answer."""


class PeerClient(RestClient):
    """Calls ``<url>/api/v1/...`` on a peer with ``Authorization: Token <token>``: Strata's
    REST client, raising :class:`PeerError` with the peer named in the message."""

    error = PeerError

    def __init__(self, url: str, token: str, session=None):
        super().__init__(url, token, timeout=TIMEOUT, session=session)
        self.base = self.url.rstrip("/")

    def request(self, method: str, path: str, ok=(200, 201, 204), **kwargs):
        """The decoded JSON answer (``{}`` for an empty one); PeerError for a status outside
        ``ok`` or when the peer cannot be reached."""
        try:
            body = super().request(method, path, ok=ok, **kwargs)
        except PeerError as exc:
            if exc.status is None:
                raise PeerError(f"peer {self.base} unreachable: {exc.__cause__ or exc}"
                                ) from exc.__cause__
            detail = exc.body.get("detail", exc.body)
            raise PeerError(f"peer answered {exc.status} to {method} {path}: {detail}",
                            exc.status, exc.body) from None
        return {} if body is None else body

    def whoami(self) -> dict:
        """The peer's view of our token: ``{"username", "role", ...}``."""
        return self.request("GET", "/me/")

    def replica(self, name: str):
        """The peer's replica ``name`` (its snapshots, oldest first), or None."""
        try:
            return self.request("GET", f"/replicas/{name}/")
        except PeerError as exc:
            if exc.status == 404:
                return None
            raise

    def begin(self, **fields) -> dict:
        """Open a transfer: kind, pool, name, snapshot, parent, source."""
        return self.request("POST", "/replica-transfers/", json=fields)

    def transfer(self, transfer_id: str):
        """A transfer's state (``received`` bytes) or None if the peer dropped it."""
        try:
            return self.request("GET", f"/replica-transfers/{transfer_id}/")
        except PeerError as exc:
            if exc.status == 404:
                return None
            raise

    def put(self, transfer_id: str, offset: int, data: bytes) -> dict:
        """Append ``data`` at ``offset`` (must be what the peer has received so far)."""
        return self.request("PUT", f"/replica-transfers/{transfer_id}/data/",
                          params={"offset": offset}, data=data,
                          headers={"Content-Type": "application/octet-stream"})

    def commit(self, transfer_id: str, *, size: int, sha256: str) -> dict:
        """Ask the peer to check the stream and apply it; returns the received snapshot."""
        return self.request("POST", f"/replica-transfers/{transfer_id}/commit/",
                          json={"bytes": size, "sha256": sha256})

    def discard(self, transfer_id: str) -> None:
        self.request("DELETE", f"/replica-transfers/{transfer_id}/", ok=(204, 404))

    # -- failback (this side pulls from the peer, where the replica was promoted) --------

    def failback_snapshot(self, name: str, snapshot: str) -> dict:
        """Have the peer snapshot the file system or volume replica ``name`` was promoted
        to, as ``snapshot`` (the same name again is fine: nothing new is taken)."""
        return self.request("POST", f"/replicas/{name}/failback-snapshot/",
                          json={"snapshot": snapshot})

    def failback_stream(self, name: str, snapshot: str, parent: str, offset: int):
        """Yield the peer's send stream of ``snapshot`` (incremental on ``parent``) from
        byte ``offset`` on, followed by the trailer (see :data:`TRAILER_MAGIC`)."""
        try:
            r = self.session.get(self._url(f"/replicas/{name}/failback-stream/"),
                                 params={"snapshot": snapshot, "parent": parent,
                                         "offset": offset}, timeout=TIMEOUT, stream=True)
        except requests.RequestException as exc:
            raise PeerError(f"peer {self.base} unreachable: {exc}") from exc
        if r.status_code != 200:
            try:
                body = r.json()
            except ValueError:
                body = {"detail": r.text[:300]}
            raise PeerError(f"peer answered {r.status_code} to the failback stream: "
                            f"{body.get('detail', body)}", r.status_code, body)
        try:
            yield from r.iter_content(1 << 20)
        except requests.RequestException as exc:
            raise PeerError(f"peer {self.base} unreachable: the stream broke ({exc})") from exc
        finally:
            r.close()

    def rebase(self, name: str, snapshot: str) -> dict:
        """After failback: the peer's replica ``name`` takes ``snapshot`` (a copy of the one
        this side applied) as its newest, and accepts forward replication again."""
        return self.request("POST", f"/replicas/{name}/rebase/", json={"snapshot": snapshot})
