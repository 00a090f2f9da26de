"""The soak's clients: one thread per kind of traffic, each a real client of a real daemon
(boto3, nfs-rs, smbprotocol, qemu-io over NBD and iSCSI, the checkpoint SDK, the REST API),
a ledger of every acknowledged write with its hash, and the read-back of that ledger.

Writers cycle over a bounded key space, so that reading back everything acknowledged stays
bounded however long the soak runs. A write that was not acknowledged leaves its key unknown
(it may be half written) until a later write of that key is acknowledged. A class's reads and
read-backs hold the class's lock, so the ledger cannot change under them.
"""
from __future__ import annotations

import hashlib
import os
import random
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.soak_faults import FaultWindows, error_text

KiB, MiB = 1024, 1 << 20
RETRIES = 6          # a real client's bounded retries across a fault


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Stats:
    """Operations, latencies and errors per class; thread-safe."""

    def __init__(self, windows: FaultWindows):
        self.windows = windows
        self.lock = threading.Lock()
        self.ops: dict[str, list[float]] = {}
        self.expected: dict[str, list[str]] = {}
        self.unexpected: dict[str, list[str]] = {}
        self.gave_up: dict[str, int] = {}
        self.mismatches: list[str] = []

    def attempt(self, cls: str, fn, retries: int = RETRIES):
        """Run one operation as a client would: retry a failure a bounded number of times
        with a growing pause; each failed try is an expected refusal or an unexpected error.
        Returns fn's value, or None when every try failed."""
        for n in range(retries):
            t0 = time.monotonic()
            try:
                value = fn()
            except Mismatch as exc:
                self.mismatch(f"{cls}: {exc}")
                return None
            except Exception as exc:  # noqa: BLE001 - every failure is classified below
                text = (f"{error_text(exc)[:360]} (a try of {time.monotonic() - t0:.1f} s, "
                        f"ended {time.strftime('%H:%M:%S', time.gmtime())} UTC)")
                with self.lock:
                    book = self.expected if self.windows.expected(cls, exc) else self.unexpected
                    book.setdefault(cls, []).append(text)
                time.sleep(min(0.5 * 2 ** n, 5.0))
                continue
            with self.lock:
                self.ops.setdefault(cls, []).append(time.monotonic() - t0)
            return value
        with self.lock:
            self.gave_up[cls] = self.gave_up.get(cls, 0) + 1
        return None

    def mismatch(self, what: str) -> None:
        with self.lock:
            self.mismatches.append(what[:400])

    def table(self) -> dict:
        def pct(xs, q):
            xs = sorted(xs)
            return round(xs[min(len(xs) - 1, int(q * len(xs)))] * 1000, 1) if xs else None
        with self.lock:
            classes = sorted(set(self.ops) | set(self.expected) | set(self.unexpected))
            return {c: {"ops": len(self.ops.get(c, ())),
                        "p50_ms": pct(self.ops.get(c, ()), 0.50),
                        "p99_ms": pct(self.ops.get(c, ()), 0.99),
                        "expected_refusals": len(self.expected.get(c, ())),
                        "unexpected_errors": len(self.unexpected.get(c, ())),
                        "gave_up": self.gave_up.get(c, 0)} for c in classes}


class Mismatch(Exception):
    """Bytes read back differ from what was acknowledged."""


class Ledger:
    """key -> hash of the last acknowledged write (a key being written is unknown)."""

    def __init__(self):
        self.acked: dict = {}

    def writing(self, key) -> None:
        self.acked.pop(key, None)

    def ack(self, key, digest) -> None:
        self.acked[key] = digest


class Traffic(threading.Thread):
    """One client's loop: ``step(i)`` for i = 0, 1, ... until stopped; ``verify()`` reads
    back everything its ledger holds and returns (checked, mismatches)."""

    classes: tuple = ()
    pause = 0.05

    def __init__(self, stats: Stats, keys: int):
        super().__init__(daemon=True, name=type(self).__name__)
        self.stats, self.keys = stats, keys
        self.ledger = Ledger()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.error: str | None = None

    def setup(self) -> None:
        pass

    def run(self):
        i = 0
        while not self.stop.is_set():
            try:
                with self.lock:
                    self.step(i)
            except Exception as exc:  # noqa: BLE001 - a bug of the soak itself: reported
                self.error = error_text(exc)
                self.stats.mismatch(f"{self.name} stopped: {self.error}")
                return
            i += 1
            self.stop.wait(self.pause)

    def step(self, i: int) -> None:
        raise NotImplementedError

    def verify(self) -> tuple[int, list[str]]:
        with self.lock:
            bad = []
            for key, digest in list(self.ledger.acked.items()):
                got = self.stats.attempt(f"{self.classes[0]}:readback",
                                         lambda k=key: self.read(k), retries=RETRIES)
                if got != digest:
                    bad.append(f"{self.name} {key}: {got} != {digest}")
            return len(self.ledger.acked), bad

    def read(self, key):
        raise NotImplementedError


# ------------------------------------------------------------------------------- object


class S3Traffic(Traffic):
    """PUT, GET (checked), a multipart upload and a listing, in turn."""
    classes = ("s3_put", "s3_get", "s3_multipart", "s3_list")

    def __init__(self, stats, keys, creds: dict, bucket: str = "soak"):
        super().__init__(stats, keys)
        import boto3
        from botocore.config import Config
        # boto3's own retries off: the soak's bounded retries count every refused try
        self.s3 = boto3.client("s3", endpoint_url=creds["s3_endpoint"],
                               aws_access_key_id=creds["s3_access_key"],
                               aws_secret_access_key=creds["s3_secret_key"],
                               region_name="us-east-1",
                               config=Config(retries={"max_attempts": 1}, connect_timeout=5,
                                             read_timeout=60))
        self.bucket = bucket

    def setup(self):
        self.s3.create_bucket(Bucket=self.bucket)

    def step(self, i):
        op = i % 8
        if op in (0, 2, 4):
            key = f"obj-{random.randrange(self.keys)}"
            body = os.urandom(64 * KiB)
            self.ledger.writing(key)
            if self.stats.attempt("s3_put", lambda: self.s3.put_object(
                    Bucket=self.bucket, Key=key, Body=body)) is not None:
                self.ledger.ack(key, sha(body))
        elif op in (1, 3, 5):
            if self.ledger.acked:
                key = random.choice(list(self.ledger.acked))
                self.stats.attempt("s3_get", lambda: self._check(key))
        elif op == 6:
            if i % 48 == 6:
                self._multipart(f"big-{(i // 48) % 4}")
        else:
            self.stats.attempt("s3_list", lambda: self.s3.list_objects_v2(
                Bucket=self.bucket, MaxKeys=1000))

    def _check(self, key):
        got = self.read(key)
        if got != self.ledger.acked[key]:
            raise Mismatch(f"s3 {key} read {got}, acknowledged {self.ledger.acked[key]}")

    def _multipart(self, key):
        parts = [os.urandom(5 * MiB), os.urandom(MiB)]

        def upload():
            up = self.s3.create_multipart_upload(Bucket=self.bucket, Key=key)
            done = []
            try:
                for n, part in enumerate(parts, 1):
                    r = self.s3.upload_part(Bucket=self.bucket, Key=key, UploadId=up["UploadId"],
                                            PartNumber=n, Body=part)
                    done.append({"PartNumber": n, "ETag": r["ETag"]})
                self.s3.complete_multipart_upload(Bucket=self.bucket, Key=key,
                                                  UploadId=up["UploadId"],
                                                  MultipartUpload={"Parts": done})
            except BaseException:
                try:
                    self.s3.abort_multipart_upload(Bucket=self.bucket, Key=key,
                                                   UploadId=up["UploadId"])
                except Exception:  # noqa: BLE001 - the daemon may be down: the upload stays
                    pass
                raise
        self.ledger.writing(key)
        if self.stats.attempt("s3_multipart", upload) is not None:
            self.ledger.ack(key, sha(b"".join(parts)))

    def read(self, key):
        return sha(self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read())


# ------------------------------------------------------------------------------- file


class NfsWrites(Traffic):
    """64 KiB files written over NFSv4.1 (nfs-rs) to an export on the small pool."""
    classes = ("nfs_write",)

    def __init__(self, stats, keys, port: int, pseudo: str):
        super().__init__(stats, keys)
        self.port, self.pseudo = port, pseudo
        self.client = None

    def _client(self):
        from services.file.tests.nfs_client import connect
        if self.client is None:
            self.client = connect(self.port, self.pseudo)
        return self.client

    def _do(self, fn):
        try:
            return fn(self._client())
        except Exception:
            self.client = None     # a new session with the daemon that is back
            raise

    def step(self, i):
        from services.file.tests.nfs_client import write_file
        key = f"f-{random.randrange(self.keys)}"
        body = os.urandom(64 * KiB)
        self.ledger.writing(key)
        if self.stats.attempt("nfs_write", lambda: self._do(
                lambda c: write_file(c, key, body))) is not None:
            self.ledger.ack(key, sha(body))

    def read(self, key):
        from services.file.tests.nfs_client import read_hash
        return self._do(lambda c: read_hash(c, key)[1])


class SampleReads(NfsWrites):
    """A training job's sample feed: files of a dataset read over NFS, each checked."""
    classes = ("sample_read",)
    pause = 0.02

    def __init__(self, stats, keys, port, pseudo, directory: Path):
        super().__init__(stats, keys, port, pseudo)
        self.directory = directory

    def setup(self):
        for n in range(self.keys):
            body = os.urandom(256 * KiB)
            (self.directory / f"sample-{n}").write_bytes(body)
            self.ledger.ack(f"sample-{n}", sha(body))

    def step(self, i):
        from services.file.tests.nfs_client import read_hash
        key = f"sample-{i % self.keys}"

        def check():
            got = self._do(lambda c: read_hash(c, key)[1])
            if got != self.ledger.acked[key]:
                raise Mismatch(f"sample {key} read {got}")
        self.stats.attempt("sample_read", check)


class SmbWrites(Traffic):
    """64 KiB files written over SMB3 with encryption (smbprotocol)."""
    classes = ("smb_write",)

    def __init__(self, stats, keys, port: int, share: str, user: str, password: str):
        super().__init__(stats, keys)
        self.port, self.share, self.user, self.password = port, share, user, password

    def _path(self, key):
        return rf"\\127.0.0.1\{self.share}\{key}"

    def _do(self, fn):
        import smbclient
        try:
            smbclient.register_session("127.0.0.1", username=self.user,
                                       password=self.password, port=self.port, encrypt=True)
            return fn(smbclient)
        except Exception:
            smbclient.reset_connection_cache()   # a new connection to the smbd that is back
            raise

    def step(self, i):
        key = f"f-{random.randrange(self.keys)}"
        body = os.urandom(64 * KiB)

        def write(smb):
            with smb.open_file(self._path(key), mode="wb", port=self.port) as f:
                f.write(body)
        self.ledger.writing(key)
        if self.stats.attempt("smb_write", lambda: self._do(write)) is not None:
            self.ledger.ack(key, sha(body))

    def read(self, key):
        def read(smb):
            with smb.open_file(self._path(key), mode="rb", port=self.port) as f:
                return sha(f.read())
        return self._do(read)


# ------------------------------------------------------------------------------- block


class BlockWrites(Traffic):
    """64 KiB writes at chunk offsets of a volume with qemu-io over NBD or iSCSI (libiscsi);
    read back whole with qemu-img."""
    CHUNK = 64 * KiB

    def __init__(self, stats, keys, cls: str, url: str):
        super().__init__(stats, keys)
        self.classes, self.url = (cls,), url

    def step(self, i):
        chunk = random.randrange(self.keys)
        byte = random.randrange(1, 256)

        def write():
            done = subprocess.run(["qemu-io", "-f", "raw", "-c",
                                   f"write -P {byte} {chunk * self.CHUNK} {self.CHUNK}",
                                   self.url], capture_output=True, text=True, timeout=60)
            if done.returncode or "error" in done.stdout.lower() or \
                    "failed" in done.stdout.lower():
                raise OSError(f"qemu-io: {(done.stdout + done.stderr).strip()[:300]}")
        self.ledger.writing(chunk)
        if self.stats.attempt(self.classes[0], write) is not None:
            self.ledger.ack(chunk, byte)

    def verify(self):
        with self.lock, tempfile.TemporaryDirectory(prefix="strata-soak-") as tmp:
            out = Path(tmp, "disk.raw")

            def fetch():
                done = subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "raw",
                                       self.url, str(out)], capture_output=True, text=True,
                                      timeout=300)
                if done.returncode:
                    raise OSError(f"qemu-img: {(done.stdout + done.stderr).strip()[:300]}")
                return out.read_bytes()
            data = self.stats.attempt(f"{self.classes[0]}:readback", fetch)
            if data is None:
                return len(self.ledger.acked), [f"{self.name}: could not read the volume back"]
            bad = [f"{self.classes[0]} chunk {c}" for c, byte in self.ledger.acked.items()
                   if data[c * self.CHUNK:(c + 1) * self.CHUNK] != bytes([byte]) * self.CHUNK]
            return len(self.ledger.acked), bad


# ------------------------------------------------------------------------------- plane


class CheckpointTraffic(Traffic):
    """Checkpoint bursts through the SDK: 4 ranks write shards at once, the version is
    committed with sha256 sums; every third step a restore of the latest is read and
    checked against what was written for its step."""
    classes = ("ckpt_save", "ckpt_restore")
    RANKS, SHARD = 4, 256 * KiB
    pause = 0.5

    def __init__(self, stats, keys, credentials: Path, job: str = "soak"):
        super().__init__(stats, keys)
        from services.checkpoints.sdk import CheckpointClient
        self.client = CheckpointClient.from_credentials(str(credentials), timeout=30)
        self.job = job
        self.written: dict[int, dict] = {}   # step -> {shard: sha}, acknowledged or not
        self.committed: int | None = None

    def setup(self):
        self.client.create_job(self.job, filesystem="ckpt", keep_last=3)

    def step(self, i):
        if i % 3 == 2 and self.committed is not None:
            self.stats.attempt("ckpt_restore", self._restore)
            return
        step = (i + 1) * 100
        shards = {f"rank{r}.bin": os.urandom(self.SHARD) for r in range(self.RANKS)}
        self.written[step] = {n: sha(b) for n, b in shards.items()}

        def save():
            version = self.client.begin(self.job, step)
            if version.state == "committed":      # an earlier try was committed
                return version
            with ThreadPoolExecutor(self.RANKS) as pool:   # the ranks write at once
                list(pool.map(lambda nb: Path(version.path, nb[0]).write_bytes(nb[1]),
                              shards.items()))
            try:
                return self.client.commit_dir(version)
            except Exception:
                if self.client.version(self.job, version.id).state == "committed":
                    return version   # committed, but its answer was cut off
                raise
        if self.stats.attempt("ckpt_save", save) is not None:
            self.committed = step
        for old in [s for s in self.written if s < step - 500]:
            del self.written[old]

    def _restore(self):
        with self.client.restore(self.job, progress=False) as version:
            self._check(version)
        return True

    def _check(self, version):
        if version.step < (self.committed or 0):
            raise Mismatch(f"latest is step {version.step}, step {self.committed} was committed")
        want = self.written.get(version.step)
        if want is None:
            return
        for name, digest in want.items():
            got = sha(Path(version.path, name).read_bytes())
            if got != digest:
                raise Mismatch(f"checkpoint step {version.step} {name}: {got} != {digest}")

    def verify(self):
        with self.lock:
            if self.committed is None:
                return 0, []
            ok = self.stats.attempt("ckpt_restore:readback", self._restore)
            return 1, [] if ok else [f"checkpoint {self.job}: the latest could not be read"]


class VectorTraffic(Traffic):
    """Vector upserts (acknowledged after the WAL's fsync) and searches that must find each
    acknowledged vector as its own nearest neighbour; read back by id."""
    classes = ("vector_upsert", "vector_search")
    DIM = 8
    pause = 0.1

    def __init__(self, stats, keys, rest):
        super().__init__(stats, keys)
        self.rest = rest

    def setup(self):
        self.rest("POST", "vector-collections/", {"name": "soak", "dimension": self.DIM,
                                                  "metric": "l2", "index_type": "flat"})

    def step(self, i):
        if i % 2:
            if self.ledger.acked:
                key = random.choice(list(self.ledger.acked))
                self.stats.attempt("vector_search", lambda: self._search(key))
            return
        batch = {str(random.randrange(self.keys)): [float(random.randrange(-1000, 1000))
                                                    for _ in range(self.DIM)]
                 for _ in range(4)}
        for key in batch:
            self.ledger.writing(key)
        body = {"vectors": [{"id": k, "values": v} for k, v in batch.items()]}
        if self.stats.attempt("vector_upsert", lambda: self.rest(
                "POST", "vector-collections/soak/vectors/", body)) is not None:
            for k, v in batch.items():
                self.ledger.ack(k, tuple(v))

    def _search(self, key):
        found = self.rest("POST", "vector-collections/soak/search/",
                          {"vector": list(self.ledger.acked[key]), "k": 1})["results"]
        if not found or found[0]["score"] != 0.0 and str(found[0]["id"]) != key:
            raise Mismatch(f"vector {key} not its own nearest neighbour: {found}")

    def read(self, key):
        return tuple(self.rest("GET", f"vector-collections/soak/vectors/{key}/")["values"])


class ProtectionTraffic(Traffic):
    """A snapshot schedule run, a backup to S3, and one tier move of a file system from the
    default pool to the small one (its files checked after the move)."""
    classes = ("snapshot", "backup", "tier_move")
    pause = 2.0

    def __init__(self, stats, keys, rest, run_job, tier_dir: Path):
        super().__init__(stats, keys)
        self.rest, self.run_job, self.tier_dir = rest, run_job, tier_dir
        self.moved = False

    def setup(self):
        for n in range(8):
            body = os.urandom(128 * KiB)
            (self.tier_dir / f"t-{n}").write_bytes(body)
            self.ledger.ack(f"t-{n}", sha(body))

    def step(self, i):
        if not self.moved and i >= 2:
            if self.stats.attempt("tier_move", lambda: self.run_job(
                    "tier-moves/", {"filesystem": "tiered", "pool": "small"})) is not None:
                self.moved = True
            return
        if i % 2:
            self.stats.attempt("backup", lambda: self.run_job("backups/soak/run/"))
        else:
            self.stats.attempt("snapshot", lambda: self.run_job(
                "snapshot-schedules/soak/run/"))

    def read(self, key):
        path = self.rest("GET", "filesystems/tiered/")["path"]
        return sha(Path(path, key).read_bytes())
