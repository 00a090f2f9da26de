"""Talk to one tgtd through `tgtadm -C N`: run commands and parse `--op show` into live state."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .base import DaemonError, run_tool

# where tgtd puts its control socket ``socket.N`` and the lock file ``socket.N.lock`` of
# ``-C N`` (tgt's TGT_IPC_NAMESPACE); tgtd leaves both behind when it exits
CONTROL_DIR = Path("/var/run/tgtd")

INITIATOR_NAME_RE = re.compile(r"^(iqn\.|eui\.|naa\.)", re.I)


@dataclass
class LiveLun:
    """A LUN as tgtd reports it (size is in decimal MB, rounded down)."""

    lun: int
    path: str | None
    size_mb: int
    read_only: bool


@dataclass
class LiveTarget:
    """A target as tgtd reports it."""

    tid: int
    iqn: str
    luns: dict[int, LiveLun] = field(default_factory=dict)
    acl_names: set[str] = field(default_factory=set)
    acl_addresses: set[str] = field(default_factory=set)
    incoming: set[str] = field(default_factory=set)
    outgoing: set[str] = field(default_factory=set)
    sessions: int = 0


class Tgtadm:
    """`tgtadm` bound to one control socket number."""

    def __init__(self, control_port: int, binary: str = "tgtadm"):
        self.control_port = control_port
        self.binary = binary

    def argv(self, *args: str) -> list[str]:
        return [self.binary, "-C", str(self.control_port), "--lld", "iscsi", *args]

    def run(self, *args: str, what: str = "") -> str:
        """Run one tgtadm command; DaemonError (with tgtadm's message) if it fails."""
        return run_tool(self.argv(*args), what=what or f"tgtadm {' '.join(args[:4])}",
                        timeout=30).stdout.decode(errors="replace")

    def answers(self) -> bool:
        """Whether a tgtd answers on this control socket."""
        try:
            self.run("--op", "show", "--mode", "sys")
            return True
        except DaemonError:
            return False

    def control_files(self) -> list[Path]:
        """tgtd's control socket and lock file for this number."""
        return [CONTROL_DIR / f"socket.{self.control_port}{suffix}" for suffix in ("", ".lock")]

    def remove_control_files(self) -> None:
        """Remove the control socket and lock file a stopped tgtd left; kept while a tgtd
        still answers on them (removing them would cut us off from it)."""
        if self.answers():
            return
        for path in self.control_files():
            path.unlink(missing_ok=True)

    def show_targets(self) -> dict[str, LiveTarget]:
        """Parse `--op show --mode target` into {iqn: LiveTarget}."""
        return parse_show_targets(self.run("--op", "show", "--mode", "target"))

    def show_accounts(self) -> set[str]:
        """User names of every CHAP account tgtd knows."""
        out = self.run("--op", "show", "--mode", "account")
        return {line.strip() for line in out.splitlines()[1:] if line.strip()}


def parse_show_targets(text: str) -> dict[str, LiveTarget]:
    """Parse tgtadm's indented `show target` listing (tgt 1.0.x layout)."""
    targets: dict[str, LiveTarget] = {}
    cur: LiveTarget | None = None
    section = None
    lun: LiveLun | None = None
    for raw in text.splitlines():
        line = raw.strip()
        m = re.match(r"^Target (\d+): (\S+)$", raw)
        if m:
            cur = LiveTarget(int(m.group(1)), m.group(2))
            targets[cur.iqn] = cur
            section, lun = None, None
            continue
        if cur is None or not line:
            continue
        if line.endswith("information:") and raw.startswith("    ") and not raw.startswith("     "):
            section = line[:-len(" information:")]
            continue
        if section == "I_T nexus" and line.startswith("I_T nexus:"):
            cur.sessions += 1
        elif section == "LUN":
            m = re.match(r"^LUN: (\d+)$", line)
            if m:
                lun = LiveLun(int(m.group(1)), None, 0, False)
                cur.luns[lun.lun] = lun
            elif lun is not None:
                if line.startswith("Size:"):
                    lun.size_mb = int(re.match(r"Size: (\d+) MB", line).group(1))
                elif line.startswith("Readonly:"):
                    lun.read_only = line.split(":", 1)[1].strip() == "Yes"
                elif line.startswith("Backing store path:"):
                    p = line.split(":", 1)[1].strip()
                    lun.path = None if p == "None" else p
        elif section == "Account":
            if line.endswith(" (outgoing)"):
                cur.outgoing.add(line[:-len(" (outgoing)")])
            else:
                cur.incoming.add(line)
        elif section == "ACL":
            if INITIATOR_NAME_RE.match(line):
                cur.acl_names.add(line)
            else:
                cur.acl_addresses.add(line)
    for t in targets.values():
        t.luns.pop(0, None)          # LUN 0 is tgtd's own controller LUN
    return targets
