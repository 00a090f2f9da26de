"""CLI building blocks every service's `cli.py` uses: size arguments and watching a Job."""
import argparse
import sys

from plumbing.restclient import FINISHED, RestClient
from plane.cli.output import draw, job_transfer, progress_bar, show

JOB_COLS = ["id", "kind", "state", "progress", "target_name", "message"]


def parse_size(text: str) -> int:
    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    num, unit = (t[:-1], t[-1]) if t and t[-1] in units and not t[-1].isdigit() else (t, "")
    try:
        return int(float(num) * units[unit])
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 10G, 512M, 4096)")


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
