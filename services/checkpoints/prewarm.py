"""Pre-warm: bring a cold version's whole shard set back to the hot pool before a restore.

Tier moves: `hot` needs nothing; `cold` → `warming` → `hot` once every shard is copied to
the version's hot directory and verified against its manifest; a failed copy goes back to
`cold`, keeping the cold copy. The move of superseded versions to a capacity pool (which
makes versions cold), its delay and the shared I/O budget belong to the tiering issue (#7);
until then `cold_path` is set by whatever made the version cold.
"""
import os
import shutil

from django.db import transaction

from console.jobs import start_job
from console.models import Job
from services.checkpoints import verify
from services.checkpoints.models import CheckpointVersion

T = CheckpointVersion.Tier
COPY_CHUNK = 4 << 20


class PrewarmFailed(RuntimeError):
    """The cold copy could not be brought back whole; the version stays cold."""


def request_prewarm(version: CheckpointVersion, user=None) -> Job | None:
    """Start a pre-warm job for a cold version; None when it is hot or already warming."""
    from services.checkpoints import tasks

    with transaction.atomic():
        claimed = CheckpointVersion.objects.filter(pk=version.pk, tier=T.COLD).update(
            tier=T.WARMING)
        if not claimed:
            return None
        return start_job("checkpoint-prewarm", tasks.prewarm_version, user=user,
                         target=("checkpoint-version", str(version)),
                         params={"version": version.pk})


def _copy_file(src: str, dst: str, done: int, total: int, progress) -> int:
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(src, "rb") as fin, open(dst + ".warming", "wb") as fout:
        while True:
            block = fin.read(COPY_CHUNK)
            if not block:
                break
            fout.write(block)
            done += len(block)
            progress(100.0 * done / max(1, total), f"copied {done} of {total} bytes")
        fout.flush()
        os.fsync(fout.fileno())
    os.replace(dst + ".warming", dst)
    return done


def warm(version: CheckpointVersion, progress=lambda pct, msg="": None) -> dict:
    """Copy every shard of a warming version from `cold_path` to `path`, verify, mark hot."""
    version.refresh_from_db()
    if version.tier == T.HOT:
        return {"copied_bytes": 0, "note": "already hot"}
    if not version.cold_path or not os.path.isdir(version.cold_path):
        _back_to_cold(version, f"cold copy {version.cold_path!r} is missing")
        raise PrewarmFailed(f"Version {version} has no cold copy at {version.cold_path!r}.")
    manifest = version.manifest or verify.manifest_of_directory(version.cold_path)
    total = sum(e["size"] for e in manifest)
    done = 0
    try:
        for entry in manifest:
            src = os.path.join(version.cold_path, entry["name"])
            dst = os.path.join(version.path, entry["name"])
            if os.path.isfile(dst) and os.path.getsize(dst) == entry["size"] \
                    and not verify.check_manifest(version.path, [entry]):
                done += entry["size"]  # already there (a retried pre-warm)
                continue
            done = _copy_file(src, dst, done, total, progress)
        problems = verify.check_manifest(version.path, manifest)
        if problems:
            raise PrewarmFailed(verify.describe(problems))
    except (OSError, PrewarmFailed) as exc:
        _back_to_cold(version, f"pre-warm failed: {exc}")
        raise
    CheckpointVersion.objects.filter(pk=version.pk).update(tier=T.HOT, error="")
    return {"copied_bytes": done, "shards": len(manifest)}


def _back_to_cold(version: CheckpointVersion, error: str) -> None:
    CheckpointVersion.objects.filter(pk=version.pk, tier=T.WARMING).update(
        tier=T.COLD, error=error[:1000])


def mark_cold(version: CheckpointVersion, cold_path: str) -> None:
    """Record that a version's verified copy is at `cold_path` and its hot copy is released.

    The tier-down job of issue 7 calls this after copying and verifying; it refuses when
    the cold copy does not match the manifest, so the hot copy is never released early.
    """
    problems = verify.check_manifest(cold_path, version.manifest)
    if problems:
        raise PrewarmFailed("cold copy is not complete: " + verify.describe(problems))
    with transaction.atomic():
        CheckpointVersion.objects.filter(pk=version.pk).update(tier=T.COLD, cold_path=cold_path)
        if version.path and os.path.isdir(version.path):
            shutil.rmtree(version.path)
