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
