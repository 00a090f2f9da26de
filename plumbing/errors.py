"""Domain errors: what went wrong, in words a user can act on, with a short machine-readable
``code``. Services and tasks raise these (never HTTP types); the API's one exception handler
(`plane/errors.py`) maps each class to a status, and the CLI prints the message.

The dataplane's errors (`dataplane/errors.py`) are part of this tree."""


class StrataError(Exception):
    """Base class of every domain error."""

    code = "error"

    def __init__(self, message: str = "", code: str | None = None):
        super().__init__(message)
        self.message = message
        if code:
            self.code = code

    def to_dict(self) -> dict:
        """The error as the JSON body the API returns: ``{"error": code, "detail": message}``."""
        return {"error": self.code, "detail": self.message}


class Invalid(StrataError):
    """The request itself is wrong: a bad name, size, option or combination."""

    code = "invalid"


class Forbidden(StrataError):
    """The caller's role or ownership does not allow this."""

    code = "forbidden"


class NotFound(StrataError):
    """The object named does not exist."""

    code = "not_found"


class Conflict(StrataError):
    """The request is valid but the current state forbids it (in use, has dependents, busy)."""

    code = "conflict"


class Unavailable(StrataError):
    """Something the request needs is not running or not reachable (a daemon, a peer)."""

    code = "unavailable"


class NoSpace(StrataError):
    """The pool (or file system quota) that must hold the data is full: free space or grow
    it, then retry. The API answers 507 Insufficient Storage."""

    code = "no_space"


DISK_FULL_ERRNOS = (28, 122)  # ENOSPC, EDQUOT


def is_disk_full(exc: BaseException | None) -> bool:
    """True when ``exc`` (or what it was raised from) says the disk or quota is full: an
    OSError ENOSPC/EDQUOT or SQLite's "database or disk is full"."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
            return True
        if "database or disk is full" in str(exc) and type(exc).__name__ == "OperationalError":
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False
