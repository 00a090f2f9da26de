"""Commit checkpoints that training scripts wrote without Strata's API.

For each job with a file system, every step directory under `<fs path>/<job>/` (named
`step-N`, `step_N`, `checkpoint-N`, `ckpt_N` or `N`) is classified by `formats.detect`:
a finished DCP or Orbax checkpoint is verified like an API commit and committed; a save in
progress gets (or keeps) a `writing` version, which the writing timeout later aborts if it
never finishes. Directories holding nothing recognisable are left alone. Jobs with a
bucket get the same treatment for the step prefixes under `s3://<bucket>/<job>/` when an
S3 endpoint is configured (`STRATA_CHECKPOINT_S3`, later the object service).
"""
import logging
import os

from django.db import IntegrityError, transaction

from services.checkpoints import formats, service
from services.checkpoints.models import CheckpointJob, CheckpointVersion

log = logging.getLogger(__name__)
V = CheckpointVersion.State


def _writing_row(job, step, path, fmt):
    """The writing version for (job, step) at `path`, created if the step has none."""
    version = CheckpointVersion.objects.filter(job=job, step=step).first()
    if version is None:
        try:
            with transaction.atomic():
                version = CheckpointVersion.objects.create(
                    job=job, step=step, path=path, format=fmt,
                    s3_prefix=service.s3_prefix(job, os.path.basename(path)))
        except IntegrityError:  # an API begin raced us
            version = CheckpointVersion.objects.get(job=job, step=step)
    if version.state != V.WRITING or os.path.normpath(version.path) != os.path.normpath(path):
        return None  # committed or aborted already, or this step lives in another directory
    if fmt and version.format != fmt and version.format in ("", "api"):
        CheckpointVersion.objects.filter(pk=version.pk).update(format=fmt)
        version.format = fmt
    return version


def scan_job(job: CheckpointJob) -> dict:
    """Detect, verify and commit what is finished in one job's directory."""
    summary = {"job": job.name, "committed": [], "writing": [], "incomplete": {}}
    base = service.job_directory(job)
    if base is None or not os.path.isdir(base):
        _scan_s3(job, summary)
        return summary
    names = sorted(os.listdir(base))
    tmp_steps = set()
    for name in names:
        parsed = formats.step_of(name)
        if parsed and parsed[1]:
            tmp_steps.add(parsed[0])
    for name in names:
        parsed = formats.step_of(name)
        full = os.path.join(base, name)
        if parsed is None or not os.path.isdir(full):
            continue
        step, is_tmp = parsed
        if is_tmp:  # Orbax writes here, then renames to the final name
            final = os.path.join(base, name.split(formats.ORBAX_TMP)[0])
            if _writing_row(job, step, final, "orbax"):
                summary["writing"].append(step)
            continue
        existing = CheckpointVersion.objects.filter(job=job, step=step).first()
        if existing is not None and existing.state != V.WRITING:
            continue
        det = formats.detect(full)
        if (not det.finished and not det.format and existing is not None
                and existing.format == "orbax" and step not in tmp_steps):
            # the temporary directory was renamed to its final name: Orbax's commit
            det = formats.Detection("orbax", True, formats._all_files(full))
        if not det.format:
            continue
        version = _writing_row(job, step, full, det.format)
        if version is None:
            continue
        _settle(version, det, "path", summary)
    _scan_s3(job, summary)
    return summary


def _settle(version, det, location: str, summary: dict) -> None:
    """Commit a finished detection (verified like an API commit); note the rest."""
    step = version.step
    if not det.finished:
        summary["writing"].append(step)
        return
    try:
        service.commit_version(version, det.manifest, fmt=det.format, location=location)
    except service.IncompleteCheckpoint as exc:
        CheckpointVersion.objects.filter(pk=version.pk, state=V.WRITING).update(
            error=str(exc)[:1000])
        summary["incomplete"][str(step)] = [p.as_dict() for p in exc.problems]
    except service.BadManifest as exc:
        summary["incomplete"][str(step)] = [{"problem": "manifest", "detail": str(exc)}]
    else:
        summary["committed"].append(step)


def _scan_s3(job: CheckpointJob, summary: dict) -> None:
    """The same for step prefixes under `s3://<bucket>/<job>/` (no renames on S3: a DCP
    `.metadata` or Orbax's `commit_success.txt` is what marks a finished step)."""
    with service.job_objects(job) as root:
        if root is not None:
            _scan_s3_steps(job, root, summary)


def _scan_s3_steps(job: CheckpointJob, root, summary: dict) -> None:
    for name in sorted(root.subdirs()):
        parsed = formats.step_of(name)
        if parsed is None:
            continue
        step, prefix = parsed[0], service.s3_prefix(job, name)
        version = CheckpointVersion.objects.filter(job=job, step=step).first()
        if version is not None and (version.state != V.WRITING or version.s3_prefix != prefix):
            continue
        src = root.child(name)
        files = src.list()
        det = formats.classify(name, {f["name"].split("/")[0] for f in files},
                               lambda src=src: src.read(formats.DCP_METADATA),
                               lambda files=files: files, object_store=True)
        if not det.format:
            continue
        if version is None:
            try:
                with transaction.atomic():
                    version = CheckpointVersion.objects.create(
                        job=job, step=step, path="", s3_prefix=prefix, format=det.format,
                        location="s3")
            except IntegrityError:
                continue  # an API begin raced us; the next scan sees its row
        _settle(version, det, "s3", summary)


def scan_all() -> list:
    """Scan every job that has a file system or a bucket."""
    out = []
    for job in CheckpointJob.objects.select_related("filesystem"):
        try:
            out.append(scan_job(job))
        except Exception as exc:  # one job's broken storage must not stop the others
            log.warning("scanning checkpoint job %s failed: %s", job.name, exc)
            out.append({"job": job.name, "error": str(exc)})
    return out
