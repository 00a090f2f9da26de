"""A small client for the S3 gateway's admin interface (stdlib only; no Django).

The management plane uses it to mirror its desired state into the gateway::

    client = GatewayAdminClient("http://127.0.0.1:9000", token)
    client.create_bucket("ckpt", owner="alice", quota={"bytes": 10 << 30})
    client.list_buckets()   # [{"name", "owner", "bytes", "objects", "quota", ...}]

Given several endpoints (gateways serving the same buckets: the cluster nodes of the RADOS
store), a call goes to the one that last answered and moves on to the next only when a
gateway cannot be reached (the request did not get to it: no call is made twice).
"""
from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from urllib.parse import quote


class GatewayAdminError(Exception):
    """The gateway refused an admin request; ``code`` is the S3-style error code."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message


class GatewayAdminClient:
    """Calls ``/_strata/admin/`` on a gateway with its Bearer token: ``endpoint`` one URL,
    or a list of gateways serving the same buckets (tried in turn when one is unreachable)."""

    def __init__(self, endpoint: str | list[str], token: str, timeout: float = 10.0):
        endpoints = [endpoint] if isinstance(endpoint, str) else list(endpoint)
        if not endpoints:
            raise ValueError("GatewayAdminClient needs at least one endpoint")
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self.endpoint = self.endpoints[0]       # the one that answered last
        self.token = token
        self.timeout = timeout

    def _call(self, method: str, path: str, body: dict | None = None):
        unreachable = []
        for endpoint in [self.endpoint] + [e for e in self.endpoints if e != self.endpoint]:
            try:
                raw = self._request(endpoint, method, path, body)
            except urllib.error.URLError as exc:    # not sent (refused, no route): the next one
                unreachable.append(f"{endpoint}: {exc.reason}")
                continue
            self.endpoint = endpoint
            return json.loads(raw) if raw else None
        raise GatewayAdminError(0, "Unreachable", "S3 gateway not answering: "
                                + "; ".join(unreachable))

    def _request(self, endpoint: str, method: str, path: str, body: dict | None) -> bytes:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{endpoint}/_strata/admin/{path}", data=data, method=method,
                                     headers={"Authorization": f"Bearer {self.token}",
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                err = json.loads(raw)
            except ValueError:
                err = {"error": "HTTPError", "message": raw.decode(errors="replace")}
            raise GatewayAdminError(exc.code, err.get("error", ""), err.get("message", "")) from None
        except urllib.error.URLError:
            raise
        except (OSError, http.client.HTTPException) as exc:
            # sent, but no answer (timed out, connection lost): the gateway may have done it,
            # so it is not sent again elsewhere
            raise GatewayAdminError(0, "NoAnswer", f"S3 gateway at {endpoint} did not answer: "
                                    f"{exc!r}") from None

    def apply_lifecycle(self) -> dict:
        """Run one lifecycle pass now; its counts (``transitioned``, ``transitioned_bytes``,
        ``expired``, ...)."""
        return self._call("POST", "lifecycle")

    def collect_orphans(self, min_age: float | None = None) -> dict:
        """Remove what no entry names, older than ``min_age`` seconds (the gateway's own grace
        if None): a local store's orphan files, a RADOS store's sweep; its counts."""
        return self._call("POST", "gc" if min_age is None else f"gc?min_age={min_age:g}")

    def health(self) -> dict:
        """``{"status": "ok", "buckets": N}``."""
        return self._call("GET", "health")

    def list_buckets(self) -> list[dict]:
        """Every bucket with owner, versioning, quota and usage (bytes, objects)."""
        return self._call("GET", "buckets")["buckets"]

    def get_bucket(self, name: str) -> dict:
        """One bucket's settings and usage."""
        return self._call("GET", f"buckets/{quote(name)}")

    def create_bucket(self, name: str, owner: str, versioning: str | None = None,
                      quota: dict | None = None, object_lock: dict | None = None) -> dict:
        """Create a bucket owned by ``owner`` (an S3 user name from the config); with
        ``object_lock`` (``{"mode", "days"}``, both may be null) it has Object Lock."""
        body = {"name": name, "owner": owner}
        if versioning:
            body["versioning"] = versioning
        if quota:
            body["quota"] = quota
        if object_lock is not None:
            body["object_lock"] = object_lock
        return self._call("POST", "buckets", body)

    def set_encryption(self, name: str, algorithm: str | None, kms_key_id: str | None = None) -> dict:
        """Set (``AES256`` / ``aws:kms``) or remove (None) a bucket's default encryption."""
        body = {"algorithm": algorithm}
        if kms_key_id:
            body["kms_key_id"] = kms_key_id
        return self._call("PUT", f"buckets/{quote(name)}/encryption", body)

    def set_object_lock(self, name: str, mode: str | None, days: int | None) -> dict:
        """Turn Object Lock on (versioning Enabled) with a default retention (mode None: none)."""
        return self._call("PUT", f"buckets/{quote(name)}/object-lock", {"mode": mode, "days": days})

    def delete_bucket(self, name: str) -> None:
        """Delete an empty bucket (``GatewayAdminError`` code BucketNotEmpty otherwise)."""
        self._call("DELETE", f"buckets/{quote(name)}")

    def get_quota(self, name: str) -> dict:
        """``{"bytes": n, "objects": n}`` (absent keys mean unlimited)."""
        return self._call("GET", f"buckets/{quote(name)}/quota")

    def set_quota(self, name: str, bytes: int | None = None, objects: int | None = None) -> dict:
        """Set (or with None, lift) the bucket's byte and object quotas."""
        return self._call("PUT", f"buckets/{quote(name)}/quota", {"bytes": bytes, "objects": objects})

    def get_versioning(self, name: str) -> str:
        """'Enabled', 'Suspended' or 'Disabled'."""
        return self._call("GET", f"buckets/{quote(name)}/versioning")["status"]

    def set_versioning(self, name: str, status: str) -> str:
        """Enable or suspend versioning ('Enabled' | 'Suspended')."""
        return self._call("PUT", f"buckets/{quote(name)}/versioning", {"status": status})["status"]

    def set_access(self, name: str, **settings) -> dict:
        """Set any of ``acl`` (a canned ACL), ``public_access_block`` (the four flags, or None
        to remove it) and ``ownership`` (object ownership, or None); answers all three."""
        return self._call("PUT", f"buckets/{quote(name)}/access", settings)
    def get_policy(self, name: str) -> dict | None:
        """The bucket policy document, or None."""
        return self._call("GET", f"buckets/{quote(name)}/policy")["policy"]

    def set_policy(self, name: str, policy: dict | None) -> dict | None:
        """Replace (None: delete) the bucket policy; code MalformedPolicy when it is not valid."""
        if policy is None:
            self._call("DELETE", f"buckets/{quote(name)}/policy")
            return None
        return self._call("PUT", f"buckets/{quote(name)}/policy", {"policy": policy})["policy"]

    def get_cors(self, name: str) -> list | None:
        """The bucket's CORS rules (S3's JSON shape: AllowedOrigins, AllowedMethods, ...), or None."""
        return self._call("GET", f"buckets/{quote(name)}/cors")["rules"]

    def set_cors(self, name: str, rules: list | None) -> list | None:
        """Replace (None: delete) the CORS rules; codes MalformedXML / InvalidRequest when invalid."""
        if rules is None:
            self._call("DELETE", f"buckets/{quote(name)}/cors")
            return None
        return self._call("PUT", f"buckets/{quote(name)}/cors", {"rules": rules})["rules"]

    # -- bucket snapshots and the change feed (see services.object.gateway.snapshots) ----------

    def list_snapshots(self, bucket: str) -> list[dict]:
        """``[{"name", "created", "objects", "bytes"}]``, oldest first."""
        return self._call("GET", f"buckets/{quote(bucket)}/snapshots")["snapshots"]

    def create_snapshot(self, bucket: str, name: str) -> dict:
        """Record the bucket's current versions as snapshot ``name`` (versioning must be
        Enabled: code InvalidBucketState otherwise)."""
        return self._call("POST", f"buckets/{quote(bucket)}/snapshots", {"name": name})

    def get_snapshot(self, bucket: str, name: str, entries: bool = False, after: str = "",
                     max_keys: int = 1000) -> dict:
        """One snapshot; with ``entries`` also a page of its key -> version entries."""
        path = f"buckets/{quote(bucket)}/snapshots/{quote(name)}"
        if entries:
            path += f"?entries=1&after={quote(after)}&max_keys={int(max_keys)}"
        return self._call("GET", path)

    def delete_snapshot(self, bucket: str, name: str) -> None:
        """Delete a snapshot; the versions it held may then be deleted."""
        self._call("DELETE", f"buckets/{quote(bucket)}/snapshots/{quote(name)}")

    def restore_snapshot_page(self, bucket: str, name: str, target: str, after: str = "",
                              max_keys: int | None = None, max_bytes: int | None = None) -> dict:
        """Copy the next page of the snapshot into bucket ``target`` (which exists and is
        empty, or is being restored from this snapshot): ``{"copied", "skipped", "bytes",
        "next", "done", "total"}``; call again with ``after=next`` until ``done``."""
        body = {"target": target, "after": after}
        if max_keys:
            body["max_keys"] = max_keys
        if max_bytes:
            body["max_bytes"] = max_bytes
        return self._call("POST", f"buckets/{quote(bucket)}/snapshots/{quote(name)}/restore", body)

    def changes(self, bucket: str, after: int, limit: int = 1000) -> dict:
        """Versions and delete markers written after sequence ``after``, oldest first:
        ``{"horizon", "upto", "truncated", "changes": [{"key", "version_id", "seq", "marker",
        "size", "etag"}]}``; call again with ``after=horizon`` while ``truncated``: then
        everything written up to ``upto`` has been listed."""
        return self._call("GET", f"buckets/{quote(bucket)}/changes?after={int(after)}&limit={int(limit)}")
