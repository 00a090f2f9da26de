"""Bind mounts for the node plugin, and what /proc/self/mountinfo says is mounted where."""
import os
import subprocess


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040 ...)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_points() -> dict[str, dict]:
    """Every mount point of this mount namespace: {path: {"root", "options", "source"}};
    the last mount over a path wins, as it hides those under it."""
    found = {}
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            sep = fields.index("-")
            found[_unescape(fields[4])] = {
                "root": _unescape(fields[3]), "options": fields[5].split(","),
                "fstype": fields[sep + 1], "source": _unescape(fields[sep + 2])}
    return found


def is_mount_point(path: str) -> bool:
    return os.path.realpath(path) in mount_points()


def _run(*args: str) -> None:
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        raise OSError(f"{' '.join(args)}: {done.stderr.strip() or done.returncode}")


def bind(source: str, target: str, read_only: bool = False) -> None:
    """Bind-mount ``source`` on ``target``; read-only binds need a remount in Linux."""
    _run("mount", "--bind", source, target)
    if read_only:
        try:
            _run("mount", "-o", "remount,bind,ro", target)
        except OSError:
            _run("umount", target)
            raise


def mount(device: str, target: str, fs_type: str, flags: list[str]) -> None:
    _run("mount", "-t", fs_type, *(["-o", ",".join(flags)] if flags else []), device, target)


def unmount(path: str) -> None:
    """Unmount ``path`` until nothing is mounted there (stacked binds included)."""
    while is_mount_point(path):
        _run("umount", path)
