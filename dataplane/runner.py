"""The injectable command runner every driver uses to run external tools.

Drivers never call ``subprocess`` directly: they call ``runner.run(argv)`` (and
``runner.popen(argv, ...)`` for streams), so tests and other callers can swap in a runner
that records or fakes commands.
"""

import subprocess
from typing import Optional, Sequence

from .errors import CommandFailed


class Runner:
    """Runs commands with ``subprocess``; raises :class:`CommandFailed` on a non-zero exit.

    ``log``, when given, is a list that receives every argv run (useful for debugging).
    """

    def __init__(self, timeout: Optional[float] = 600, log: Optional[list] = None):
        self.timeout = timeout
        self.log = log

    def run(self, argv: Sequence[str], input=None, check: bool = True,
            timeout: Optional[float] = None) -> subprocess.CompletedProcess:
        """Run ``argv`` and return the CompletedProcess (text stdout/stderr).

        ``input`` may be str or bytes. A non-zero exit raises CommandFailed with stderr in the
        message unless ``check`` is False.
        """
        argv = [str(a) for a in argv]
        if self.log is not None:
            self.log.append(argv)
        binary = isinstance(input, (bytes, bytearray))
        try:
            proc = subprocess.run(
                argv, input=input, capture_output=True, text=not binary,
                timeout=timeout or self.timeout,
            )
        except FileNotFoundError as exc:
            raise CommandFailed(argv, 127, f"{argv[0]}: command not found ({exc})") from exc
        except subprocess.TimeoutExpired as exc:
            raise CommandFailed(argv, -1, f"timed out after {exc.timeout} s") from exc
        if binary:
            proc.stdout = proc.stdout.decode(errors="replace")
            proc.stderr = proc.stderr.decode(errors="replace")
        if check and proc.returncode != 0:
            raise CommandFailed(argv, proc.returncode, proc.stderr, proc.stdout)
        return proc

    def popen(self, argv: Sequence[str], **kwargs) -> subprocess.Popen:
        """Start ``argv`` for streaming (send/receive); the caller owns the process."""
        argv = [str(a) for a in argv]
        if self.log is not None:
            self.log.append(argv)
        try:
            return subprocess.Popen(argv, **kwargs)
        except FileNotFoundError as exc:
            raise CommandFailed(argv, 127, f"{argv[0]}: command not found ({exc})") from exc


_default = Runner()


def run(argv: Sequence[str], input=None) -> subprocess.CompletedProcess:
    """Run ``argv`` with the default runner (see :meth:`Runner.run`)."""
    return _default.run(argv, input=input)
