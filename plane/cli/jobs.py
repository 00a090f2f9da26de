"""CLI building blocks every service's `cli.py` uses: size arguments and watching a Job."""
import argparse
import sys

from plumbing import sizes
from plumbing.errors import Invalid
from plumbing.restclient import FINISHED, RestClient
from plane.cli.output import draw, job_transfer, progress_bar, show

JOB_COLS = ["id", "kind", "state", "progress", "target_name", "message"]


def parse_size(text: str) -> int:
    """Bytes from "4096", "512M"/"512MiB" (binary: 512 * 2**20) or "5GB" (decimal: 5 * 10**9);
    the one rule of :mod:`plumbing.sizes`."""
    try:
        return sizes.parse_size(text)
    except Invalid as exc:
        raise argparse.ArgumentTypeError(exc.message.removeprefix("invalid size ")) from None


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
