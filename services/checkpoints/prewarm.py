"""Pre-warm: bring a cold version's whole file set back to the hot pool before a restore.

Tiers: `hot` needs nothing; `cold` → `warming` → `hot` once every file of the cold copy
is copied to the version's hot directory and the manifest verifies there (sha256 where the
manifest has one: tier-down records it for every shard); a failed copy goes back to `cold`,
keeping the cold copy, which pre-warm never changes (and keeps after success too: tier-down
switches back to it without copying again while it is whole). The copy is drawn from the shared I/O
budget under the class `prewarm` (unlimited unless an operator caps that class or the
appliance's background rate) while nobody waits for it; once a restore holds a lease on the
version (checked before each file), the copy is foreground work: not throttled, and it
pre-empts background work like a save does. Tier-down (`tierdown.py`) is what makes a version cold; it
calls `mark_cold` to switch.

A pre-warm cut off by a dead worker leaves the version `warming` with no live Job; asking
again (a lease, `POST .../prewarm/`) starts a new Job that finishes the copy.
"""
import os

from django.db import transaction

from plane import iobudget
from plane.jobs import job_task, start_job
from plane.models import Job
from services.checkpoints import sources, verify
from services.checkpoints.models import CheckpointVersion, active_job

T = CheckpointVersion.Tier
COPY_CHUNK = 4 << 20


class PrewarmFailed(RuntimeError):
    """The cold copy could not be brought back whole; the version stays cold."""


JOB_KIND = "checkpoint-prewarm"


def request_prewarm(version: CheckpointVersion, user=None) -> Job | None:
    """The pre-warm Job of a version that is not hot: the one already pending or running,
    else a new one (for a cold version, or a warming one whose Job died); None when hot."""
    with transaction.atomic():
        version = CheckpointVersion.objects.select_for_update().get(pk=version.pk)
        if version.tier == T.HOT:
            return None
        if version.tier == T.WARMING:
            running = active_job(JOB_KIND, version.pk)
            if running is not None:
                return running
        CheckpointVersion.objects.filter(pk=version.pk).update(tier=T.WARMING)
        return start_job(JOB_KIND, prewarm_version, user=user,
                         target=("checkpoint-version", str(version)),
                         params={"version": version.pk})


def _chunks(path: str):
    with open(path, "rb") as f:
        while True:
            block = f.read(COPY_CHUNK)
            if not block:
                return
            yield block


def _stream(src: str, waited_for: bool):
    """The file's chunks: a restore waiting on them is foreground work (it pre-empts the
    background budget and is not throttled); otherwise drawn from the budget as `prewarm`."""
    if not waited_for:
        yield from iobudget.throttle(_chunks(src), "prewarm")
        return
    for block in _chunks(src):
        iobudget.foreground()
        yield block


def _copy_file(src: str, dst: str, done: int, total: int, progress, waited_for=False) -> int:
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(dst + ".warming", "wb") as fout:
        for block in _stream(src, waited_for):
            fout.write(block)
            done += len(block)
            progress(100.0 * done / max(1, total), f"copied {done} of {total} bytes",
                     done=done, total=total)
        fout.flush()
        os.fsync(fout.fileno())
    os.replace(dst + ".warming", dst)
    return done


def warm(version: CheckpointVersion, progress=lambda pct, msg="", **counts: None) -> dict:
    """Copy every file of a warming version from `cold_path` to `path`, verify, mark hot.

    Files already whole in the hot directory (a retried pre-warm) are not copied again."""
    version.refresh_from_db()
    if version.tier == T.HOT:
        return {"copied_bytes": 0, "note": "already hot"}
    if not version.cold_path or not os.path.isdir(version.cold_path):
        _back_to_cold(version, f"cold copy {version.cold_path!r} is missing")
        raise PrewarmFailed(f"Version {version} has no cold copy at {version.cold_path!r}.")
    manifest = version.manifest or verify.manifest_of_directory(version.cold_path)
    listed = {e["name"] for e in manifest}
    files = manifest + [e for e in verify.manifest_of_directory(version.cold_path)
                        if e["name"] not in listed]  # .metadata and the like
    total = sum(e["size"] for e in files)
    done, foreground = 0, False
    try:
        for entry in files:
            src = os.path.join(version.cold_path, entry["name"])
            dst = os.path.join(version.path, entry["name"])
            if os.path.isfile(dst) and os.path.getsize(dst) == entry["size"] \
                    and not verify.check_manifest(sources.DirectorySource(version.path), [entry]):
                done += entry["size"]  # already there (a retried pre-warm)
                continue
            waited_for = version.active_leases().exists()  # a restore took a lease
            foreground = foreground or waited_for
            done = _copy_file(src, dst, done, total, progress, waited_for)
        problems = verify.check_manifest(sources.DirectorySource(version.path), manifest)
        if problems:
            raise PrewarmFailed(verify.describe(problems))
    except (OSError, PrewarmFailed) as exc:
        _back_to_cold(version, f"pre-warm failed: {exc}")
        raise
    CheckpointVersion.objects.filter(pk=version.pk).update(tier=T.HOT, error="")
    return {"copied_bytes": done, "files": len(files), "foreground": foreground}


@job_task("checkpoints.prewarm_version")
def prewarm_version(ctx, version: int):
    """Copy a cold version back to the hot pool and verify it (with progress)."""
    return warm(CheckpointVersion.objects.get(pk=version), progress=ctx.progress)


def _back_to_cold(version: CheckpointVersion, error: str) -> None:
    CheckpointVersion.objects.filter(pk=version.pk, tier=T.WARMING).update(
        tier=T.COLD, error=error[:1000])


def mark_cold(version: CheckpointVersion, cold_path: str, *, manifest: list | None = None,
              verified: bool = False) -> bool:
    """Switch a hot version to its copy at `cold_path`, then release the hot copy.

    Unless the caller `verified` the copy already, it is checked against the manifest
    first (PrewarmFailed, hot copy kept, when it does not match). Under the version's row
    lock: when the version is leased, no longer restorable or no longer hot, nothing
    changes and this returns False (the caller removes its copy); else the version becomes
    cold (with `manifest` when given) and its hot directory is removed before the lock is
    released, so a lease taken right after sees a cold version and pre-warms it."""
    if not verified:
        problems = verify.check_manifest(sources.DirectorySource(cold_path),
                                         version.manifest)
        if problems:
            raise PrewarmFailed("cold copy is not complete: " + verify.describe(problems))
    with transaction.atomic():
        current = CheckpointVersion.objects.select_for_update().get(pk=version.pk)
        if (current.tier != T.HOT or current.state not in CheckpointVersion.RESTORABLE
                or current.active_leases().exists()):
            return False
        fields = {"tier": T.COLD, "cold_path": cold_path}
        if manifest is not None:
            fields["manifest"] = manifest
        CheckpointVersion.objects.filter(pk=version.pk).update(**fields)
        if current.path and os.path.isdir(current.path):
            sources.remove_tree(current.path)
    return True
