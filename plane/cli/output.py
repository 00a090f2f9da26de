"""Tables, JSON and the progress bar of the CLI."""
import json
import shutil
import sys


def human_bytes(n) -> str:
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def transfer_line(done, total=None, rate=None, eta=None) -> str:
    """"1.5 GiB of 4.0 GiB, 30.2 MiB/s, ETA 85 s" for a job that moves bytes ("" when it
    reports none); the parts it does not know are left out. strata.js draws the same."""
    if done is None:
        return ""
    parts = [human_bytes(done) + ("" if total is None else f" of {human_bytes(total)}")]
    if rate is not None:
        parts.append(f"{rate / (1 << 20):.1f} MiB/s")
    if eta is not None:
        parts.append(f"ETA {eta:.0f} s")
    return ", ".join(parts)


def job_transfer(job: dict) -> str:
    """The transfer line of a job as the API returns it."""
    return transfer_line(job.get("bytes_done"), job.get("bytes_total"),
                         job.get("rate_bytes_per_s"), job.get("eta_seconds"))


def show(data, columns, as_json: bool) -> None:
    """Print rows (a dict or a list of dicts) as JSON or as a table of `columns`."""
    if as_json:
        print(json.dumps(data, indent=2, default=str))
        return
    rows = data if isinstance(data, list) else [data]
    cells = [[_cell(row.get(c), c) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip())
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())


def _cell(value, column) -> str:
    if column.endswith("_bytes"):
        return human_bytes(value)
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return "-" if value is None or value == "" else str(value)


def progress_bar(pct: float, message: str, width: int | None = None) -> str:
    width = width or max(10, min(40, shutil.get_terminal_size((80, 20)).columns - 40))
    filled = int(round(width * max(0.0, min(100.0, pct)) / 100))
    return f"[{'#' * filled}{'.' * (width - filled)}] {pct:5.1f}% {message}"[:200]


def draw(line: str, final: bool = False) -> None:
    if sys.stdout.isatty():
        sys.stdout.write("\r\033[K" + line + ("\n" if final else ""))
    else:
        sys.stdout.write(line + "\n")
    sys.stdout.flush()
