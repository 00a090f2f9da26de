"""Where benchmarks keep their runs: ``bench/results/<bench>.jsonl``, one JSON object a run,
appended by the bench itself, and ``bench/results/<bench>.md``, a table of every run made from
that file. Figures are never edited by hand: a run that is worth quoting is in the file."""
from __future__ import annotations

import datetime
import json
import os
import subprocess
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=RESULTS.parent,
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def record(bench: str, run: dict) -> dict:
    """Append ``run`` (with the time, the commit and the machine's cores added) to the bench's
    file; returns what was written."""
    RESULTS.mkdir(exist_ok=True)
    entry = {"time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
             "commit": _commit(), "cores": os.cpu_count(), **run}
    with open(RESULTS / f"{bench}.jsonl", "a") as fh:
        fh.write(json.dumps(entry, sort_keys=True) + "\n")
    return entry


def runs(bench: str) -> list[dict]:
    """Every run recorded for ``bench``, oldest first."""
    path = RESULTS / f"{bench}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_table(bench: str, title: str, header: list[str], rows: list[list[str]],
                notes: str = "") -> Path:
    """Rewrite ``bench/results/<bench>.md`` with one table (a row per run)."""
    lines = [f"# {title}", "", "Written by the bench from "
             f"`{bench}.jsonl` (one line a run); do not edit by hand.", ""]
    if notes:
        lines += [notes.strip(), ""]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    path = RESULTS / f"{bench}.md"
    path.write_text("\n".join(lines) + "\n")
    return path
