"""Strata checkpoint SDK for training scripts: begin, commit, latest, lease, restore.

Importable without Django; needs only `requests` (`torch` for the DCP helpers, `boto3`
for checkpoints written through S3)::

    from services.checkpoints.sdk import CheckpointClient
    client = CheckpointClient("http://strata:8000", token)
    with client.saving("llm", step=1000) as version:      # commits on success, aborts on error
        torch.save(model.state_dict(), f"{version.path}/model.pt")
    with client.restore("llm") as version:                 # lease, wait for pre-warm, release
        state = torch.load(f"{version.path}/model.pt")

PyTorch DCP (:mod:`.dcp`): `client.dcp_writer(job, step)` is a StorageWriter on the
version's directory, or on its S3 prefix when the job has only a bucket (`via="s3"` forces
S3: parallel multipart uploads, few objects per rank); it commits the version in
`finish()`. `client.dcp_reader(job)` reads a leased version (the S3 one by ranged GETs, at
any world size). `client.async_save(job, step, state_dict)` returns a
`concurrent.futures.Future` that resolves to the committed `Version`.

S3 credentials: `CheckpointClient(url, token, s3={"endpoint", "access_key", "secret_key",
"region"?})`, or the environment (`STRATA_S3_ENDPOINT`, `STRATA_S3_ACCESS_KEY`,
`STRATA_S3_SECRET_KEY`; `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` also do), or
`CheckpointClient.from_credentials("credentials.json")` of `strata up`.
"""
import concurrent.futures
import contextlib
import hashlib
import json
import os
import sys
from dataclasses import dataclass, field

import requests

from plumbing.restclient import JobFailed, RestClient
from services.checkpoints.sdkerrors import IncompleteCheckpointError, StrataError, error_for

# The DCP classes (StrataStorageWriter, StrataS3StorageWriter, StrataStorageReader,
# StrataS3StorageReader) live in .dcp and are imported on first use (see __getattr__).
__all__ = ["CheckpointClient", "IncompleteCheckpointError", "JobHandle", "Lease", "StrataError",
           "Version"]
DCP_CLASSES = ("StrataStorageWriter", "StrataS3StorageWriter", "StrataStorageReader",
               "StrataS3StorageReader")


class _PlaneClient(RestClient):
    """The REST client of the SDK: refusals raise the SDK's errors; a plane that cannot be
    reached raises requests' own error, as the SDK always did."""

    error = staticmethod(error_for)

    def request(self, method: str, path: str, ok=None, **kwargs):
        try:
            return super().request(method, path, ok=ok, **kwargs)
        except StrataError as exc:
            if exc.status is None and isinstance(exc.__cause__, requests.RequestException):
                raise exc.__cause__ from None
            raise


@dataclass
class Version:
    """A checkpoint version: where to write or read it and its state."""

    id: int
    job: str
    step: int
    state: str
    path: str = ""
    s3_prefix: str = ""
    tier: str = "hot"
    relative_path: str = ""
    nfs_path: str | None = None  # host:/pseudo/... where the job's file system is exported
    smb_path: str | None = None  # \\host\share\... where it is shared over SMB
    raw: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, job: str, data: dict) -> "Version":
        return cls(id=data["id"], job=data.get("job") or job, step=data["step"],
                   state=data["state"], path=data.get("path", ""),
                   s3_prefix=data.get("s3_prefix", ""), tier=data.get("tier", "hot"),
                   relative_path=data.get("relative_path", ""),
                   nfs_path=data.get("nfs_path"), smb_path=data.get("smb_path"), raw=data)


@dataclass
class Lease:
    """A hold on a version while it is restored; release it (or use it as a context)."""

    id: int
    version: Version
    expires_at: str
    prewarm_job: str | None
    client: "CheckpointClient" = field(repr=False)

    def release(self) -> None:
        self.client.release(self)

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def manifest_of(path: str, sha256: bool = True) -> list:
    """A manifest of every file under `path` (relative names, sizes, sha256 when asked)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames.sort()
        for fn in sorted(filenames):
            full = os.path.join(dirpath, fn)
            entry = {"name": os.path.relpath(full, path), "size": os.path.getsize(full)}
            if sha256:
                entry["sha256"] = _sha256(full)
            out.append(entry)
    return out


class JobHandle:
    """One training job's checkpoints, the shape a training loop wants::

        job = client.job("llm")
        with job.begin(step) as version:   # commit on success, abort on an exception
            ...write into version.path...
        with job.restore() as version:     # latest, leased and pre-warmed
            ...read version.path...
    """

    def __init__(self, client: "CheckpointClient", name: str):
        self.client, self.name = client, name

    def begin(self, step: int, sha256: bool = True):
        return self.client.saving(self.name, step, sha256=sha256)

    def latest(self) -> "Version | None":
        return self.client.latest(self.name)

    def restore(self, version: "Version | None" = None, **kwargs):
        """Lease `version` (latest by default), wait for its pre-warm with a progress bar on
        stderr (`progress=False` hides it, a callable gets (percent, message)), yield it,
        release the lease."""
        return self.client.restore(self.name, version, **kwargs)

    def async_save(self, state_dict: dict, step: int, **writer) -> concurrent.futures.Future:
        return self.client.async_save(self.name, step, state_dict, **writer)

    def dcp_writer(self, step: int, **kwargs):
        return self.client.dcp_writer(self.name, step, **kwargs)

    def dcp_reader(self, version: "Version | None" = None, **kwargs):
        return self.client.dcp_reader(self.name, version, **kwargs)


class CheckpointClient:
    """A thin client of `/api/v1/checkpoint-jobs/` authenticated with an API token."""

    def __init__(self, url: str, token: str, timeout: float = 60.0, max_workers: int = 2,
                 s3: dict | None = None):
        self.rest = _PlaneClient(url, token, timeout)
        self.url = self.rest.root  # without /api/v1
        self.timeout = timeout
        self.session = self.rest.session
        self._max_workers = max_workers
        self._executor = None
        self._s3 = dict(s3) if s3 else None

    def __getstate__(self):  # DCP's process-based async_save pickles the writer and us
        return dict(self.__dict__, _executor=None)

    @classmethod
    def from_credentials(cls, path: str, **kwargs) -> "CheckpointClient":
        """A client from `strata up`'s credentials.json (API token and S3 keys)."""
        with open(path) as f:
            creds = json.load(f)
        s3 = {"endpoint": creds["s3_endpoint"], "access_key": creds["s3_access_key"],
              "secret_key": creds["s3_secret_key"],
              "region": creds.get("s3_region", "us-east-1"),
              "ca_bundle": creds.get("ca_bundle")} if creds.get("s3_endpoint") else None
        client = cls(creds["api_url"], creds["token"], s3=s3, **kwargs)
        if creds.get("ca_bundle"):  # `strata up --tls`: trust the appliance's certificate
            client.rest.verify = creds["ca_bundle"]
        return client

    def s3_config(self) -> dict | None:
        """The S3 endpoint and keys shards go through (given, or from the environment)."""
        if self._s3:
            return self._s3
        env = os.environ.get
        endpoint = env("STRATA_S3_ENDPOINT") or env("AWS_ENDPOINT_URL_S3") or env(
            "AWS_ENDPOINT_URL")
        access = env("STRATA_S3_ACCESS_KEY") or env("AWS_ACCESS_KEY_ID")
        secret = env("STRATA_S3_SECRET_KEY") or env("AWS_SECRET_ACCESS_KEY")
        if endpoint and access and secret:
            return {"endpoint": endpoint, "access_key": access, "secret_key": secret,
                    "region": env("STRATA_S3_REGION") or env("AWS_DEFAULT_REGION") or "us-east-1"}
        return None

    # -- plumbing --------------------------------------------------------------------------
    def _call(self, method: str, path: str, body=None, allow=(200, 201, 202, 204)):
        """(status, JSON answer or {}); StrataError for a status not in `allow`."""
        seen = []  # the status, which RestClient.request does not return
        data = self.rest.request(method, path, ok=allow, json=body, hooks={
            "response": lambda r, *args, **kwargs: seen.append(r.status_code)})
        return seen[-1], {} if data is None else data

    def _versions(self, job: str) -> str:
        return f"checkpoint-jobs/{job}/versions/"

    # -- jobs ------------------------------------------------------------------------------
    def job(self, name: str) -> JobHandle:
        """A handle on one job: `begin(step)` context manager, `latest()`, `restore()`."""
        return JobHandle(self, name)

    def job_info(self, name: str) -> dict:
        """The job as the API shows it (`directory`, `bucket`, policies, `latest`)."""
        return self._call("GET", f"checkpoint-jobs/{name}/")[1]

    def create_job(self, name: str, filesystem: str | None = None, bucket: str = "",
                   **policy) -> dict:
        """Register a training job (`keep_last`, `keep_every`, `writing_timeout`, ...)."""
        body = {"name": name, "filesystem": filesystem, "bucket": bucket, **policy}
        return self._call("POST", "checkpoint-jobs/", body)[1]

    # -- saving ----------------------------------------------------------------------------
    def begin(self, job: str, step: int) -> Version:
        """Start (or join: every rank may call it) the version of `job` at `step`."""
        return Version.from_json(job, self._call("POST", self._versions(job), {"step": step})[1])

    def commit(self, version: Version, manifest: list, location: str = "") -> Version:
        """Commit with a manifest [{name, size, sha256?|crc32c?}]; raises
        IncompleteCheckpointError naming every bad shard (nothing changes then).
        `location` is "path" or "s3" (default: the directory when the job has one)."""
        body = {"manifest": manifest, **({"location": location} if location else {})}
        _, data = self._call("POST", f"{self._versions(version.job)}{version.id}/commit/",
                             body)
        return Version.from_json(version.job, data)

    def commit_dir(self, version: Version, sha256: bool = True) -> Version:
        """Commit every file written under the version's directory (with sha256 sums)."""
        return self.commit(version, manifest_of(version.path, sha256=sha256))

    def abort(self, version: Version) -> Version:
        _, data = self._call("POST", f"{self._versions(version.job)}{version.id}/abort/")
        return Version.from_json(version.job, data)

    @contextlib.contextmanager
    def saving(self, job: str, step: int, sha256: bool = True):
        """Yield a new version to write into; commit it on success, abort on an exception."""
        version = self.begin(job, step)
        try:
            yield version
        except BaseException:
            with contextlib.suppress(Exception):
                self.abort(version)
            raise
        committed = self.commit_dir(version, sha256=sha256)
        version.state, version.raw = committed.state, committed.raw

    # -- restoring -------------------------------------------------------------------------
    def latest(self, job: str) -> Version | None:
        """The newest committed version of `job`, or None if there is none yet."""
        status, data = self._call("GET", f"checkpoint-jobs/{job}/latest/", allow=(200, 404))
        return Version.from_json(job, data) if status == 200 else None

    def version(self, job: str, version_id: int) -> Version:
        return Version.from_json(job, self._call("GET", f"{self._versions(job)}{version_id}/")[1])

    def lease(self, version: Version, ttl_seconds: int = 3600, holder: str = "",
              wait: bool = True, progress=None) -> Lease:
        """Hold `version` for a restore; when it is cold, wait for its pre-warm to finish
        (`progress`: True draws a bar on stderr, a callable gets (percent, message))."""
        _, data = self._call("POST", f"{self._versions(version.job)}{version.id}/lease/",
                             {"ttl_seconds": ttl_seconds, "holder": holder or _holder()})
        lease = Lease(data["id"], version, data["expires_at"], data.get("prewarm_job"), self)
        if wait and lease.prewarm_job:
            bar = ProgressBar(f"pre-warm {version.job}@{version.step}") if progress is True \
                else None
            try:
                self.wait_job(lease.prewarm_job, progress=bar or progress or None)
            finally:
                if bar:
                    bar.close()
        return lease

    def release(self, lease: Lease) -> None:
        self._call("DELETE", f"checkpoint-leases/{lease.id}/", allow=(204, 404))

    def pin(self, version: Version, reason: str = "") -> Version:
        _, data = self._call("POST", f"{self._versions(version.job)}{version.id}/pin/",
                             {"reason": reason})
        return Version.from_json(version.job, data)

    def unpin(self, version: Version) -> Version:
        _, data = self._call("POST", f"{self._versions(version.job)}{version.id}/unpin/")
        return Version.from_json(version.job, data)

    def wait_job(self, job_url: str, progress=None, poll: float = 0.2, max_poll: float = 2.0,
                 timeout: float = 3600) -> dict:
        """Poll a plane job until it ends; `progress(pct, message)` sees each update.

        The first poll comes after `poll` seconds, then the wait doubles up to `max_poll`
        (a short pre-warm is seen at once, a long one costs few requests)."""
        def on_update(job):
            progress(job.get("progress", 0), job.get("message", ""))

        try:
            return self.rest.wait_job(job_url, timeout=timeout, poll=poll, max_poll=max_poll,
                                      on_update=on_update if progress else None)
        except JobFailed as exc:
            raise StrataError(409, exc.body) from exc

    @contextlib.contextmanager
    def restore(self, job: str, version: Version | None = None, ttl_seconds: int = 3600,
                progress=True):
        """Yield the version to read (latest by default) under a lease, pre-warmed.

        While a cold version pre-warms, `progress=True` draws a one-line bar on stderr,
        a callable gets (percent, message) instead, False shows nothing."""
        version = version or self.latest(job)
        if version is None:
            raise StrataError(404, {"error": "not_found",
                                    "detail": f"checkpoint job {job} has no committed version"})
        lease = self.lease(version, ttl_seconds=ttl_seconds, progress=progress)
        try:
            yield self.version(job, version.id)
        finally:
            lease.release()

    # -- PyTorch DCP -----------------------------------------------------------------------
    def dcp_writer(self, job: str, step: int, via: str = "", **kwargs):
        """A DCP StorageWriter on version (job, step) that commits in finish(): through the
        version's directory, or its S3 prefix when the job has no file system (or
        `via="s3"`; then `thread_count`, `part_size`, `max_concurrency`,
        `multipart_threshold`, `sha256`)."""
        return _dcp().storage_writer(self, job, step, via=via, **kwargs)

    def dcp_reader(self, job: str, version: Version | None = None, via: str = "", **kwargs):
        """A DCP StorageReader on a leased version (latest by default), from where it was
        committed (directory or S3); close() (or `with`) releases the lease."""
        return _dcp().storage_reader(self, job, version, via=via, **kwargs)

    def async_save(self, job: str, step: int, state_dict: dict,
                   **writer) -> concurrent.futures.Future:
        """Stage `state_dict` to CPU copies now, save and commit it in the background.

        The future resolves to the committed Version; any error (a refused commit, a
        failed write or upload) is raised by `future.result()` and the version is aborted.
        `writer` goes to `dcp_writer` (`via`, and the S3 writer's options).
        """
        staged = _stage(state_dict)
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                self._max_workers, thread_name_prefix="strata-ckpt")
        return self._executor.submit(self._save_now, job, step, staged, writer)

    def _save_now(self, job: str, step: int, state_dict: dict, writer_kwargs: dict) -> Version:
        import torch.distributed.checkpoint as dcp

        writer = self.dcp_writer(job, step, **writer_kwargs)
        try:
            dcp.save(state_dict, storage_writer=writer)
        except BaseException:
            with contextlib.suppress(Exception):
                self.abort(writer.version)
            raise
        return writer.version

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        self.session.close()


def _holder() -> str:
    return f"{os.uname().nodename}:{os.getpid()}"


def _stage(obj):
    """Copy tensors to CPU so training may change the originals while the save runs."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _stage(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_stage(v) for v in obj)
    return obj


class ProgressBar:
    """A one-line progress bar on stderr, fed (percent, message) by `wait_job`."""

    def __init__(self, label: str, width: int = 30, stream=None):
        self.label, self.width = label, width
        self.stream = stream or sys.stderr
        self.drawn = 0  # length of the line on screen

    def __call__(self, pct, message: str = "") -> None:
        pct = max(0.0, min(100.0, float(pct or 0)))
        full = int(self.width * pct / 100)
        line = f"{self.label} [{'#' * full}{'.' * (self.width - full)}] {pct:5.1f}% {message}"
        line = line[:110]
        self.stream.write("\r" + line + " " * max(0, self.drawn - len(line)))
        self.stream.flush()
        self.drawn = len(line)

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()


def _dcp():
    """The DCP helpers (dcp.py), imported on first use."""
    from services.checkpoints import dcp  # imports torch, which the SDK does not need

    return dcp


def __getattr__(name):  # `from sdk import StrataStorageWriter` imports torch only then
    if name in DCP_CLASSES:
        return getattr(_dcp(), name)
    raise AttributeError(name)
