"""A qemu-io process kept open on an iSCSI LUN or NBD export: one client connection that
lives across server-side changes, driven one command at a time."""
import os
import selectors
import subprocess
import time

PROMPT = b"qemu-io> "


class QemuIo:
    """``QemuIo(["--image-opts", opts])`` or ``QemuIo(["-f", "raw", uri])``; ``run("read -P
    0x41 0 1M")`` returns qemu-io's answer; ``ok()`` says whether it reports no error."""

    def __init__(self, args, timeout=60):
        self.proc = subprocess.Popen(["stdbuf", "-o0", "qemu-io", *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.timeout = timeout
        self.first = self._answer()

    def _answer(self) -> str:
        buf, deadline = b"", time.monotonic() + self.timeout
        while not buf.endswith(PROMPT):
            with selectors.DefaultSelector() as sel:  # not select(2): fds may pass 1024
                sel.register(self.proc.stdout, selectors.EVENT_READ)
                ready = sel.select(max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError(f"qemu-io did not answer: {buf!r}")
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                raise EOFError(f"qemu-io exited: {buf!r}")
            buf += chunk
        return buf[:-len(PROMPT)].decode(errors="replace")

    def run(self, command: str) -> str:
        self.proc.stdin.write(command.encode() + b"\n")
        self.proc.stdin.flush()
        return self._answer()

    def check(self, command: str) -> str:
        """Run ``command``; AssertionError with qemu-io's answer if it reports a failure."""
        out = self.run(command)
        bad = ("fail", "error", "Error", "not ready", "Not Ready")
        assert not any(b in out for b in bad), f"{command}: {out}"
        return out

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b"quit\n")
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
