"""CLI building blocks every service's `cli.py` uses: size arguments and watching a Job."""
import argparse
import re
import sys

from plumbing.restclient import FINISHED, RestClient
from plane.cli.output import draw, job_transfer, progress_bar, show

JOB_COLS = ["id", "kind", "state", "progress", "target_name", "message"]


SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50,
              "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "pib": 1 << 50,
              "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15, "b": 1}
SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")


def parse_size(text: str) -> int:
    """Bytes from "4096", "512M"/"512MiB" (binary: 512 * 2**20) or "5GB" (decimal: 5 * 10**9)."""
    match = SIZE_RE.match(text.lower())
    if not match or match.group(2) not in SIZE_UNITS:
        raise argparse.ArgumentTypeError(
            f"not a size: {text!r} (examples: 10G or 10GiB = 10 * 2**30, 10GB = 10 * 10**9, 4096)")
    return int(float(match.group(1)) * SIZE_UNITS[match.group(2)])


def watch_job(client: RestClient, job_id, as_json: bool) -> int:
    """Draw the Job's progress bar until it finishes; 0 when it succeeded, else 1."""
    def draw_progress(job):
        if not as_json:
            xfer = job_transfer(job)
            draw(progress_bar(job["progress"], (f"{xfer} | " if xfer else "")
                              + f"{job['kind']} {job['state']}: {job['message']}"),
                 final=job["state"] in FINISHED)

    job = client.wait_job(job_id, timeout=float("inf"), on_update=draw_progress,
                          raise_on_failure=False)
    if as_json:
        show(job, JOB_COLS, True)
    elif job["state"] == "failed":
        print(f"error: {job['error']}", file=sys.stderr)
    return 0 if job["state"] == "succeeded" else 1
