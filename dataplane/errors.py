"""Errors raised by the dataplane.

Every error carries a short machine-readable ``code`` (the management plane turns it into the
``error`` field of a 4xx/5xx JSON body) and a message a user can act on.
"""


class DataplaneError(Exception):
    """Base class of every dataplane error."""

    code = "error"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def to_dict(self) -> dict:
        """The error as the JSON body the API returns: ``{"error": code, "detail": message}``."""
        return {"error": self.code, "detail": self.message}


class InvalidArgument(DataplaneError):
    """A name, size, option or stream the caller gave is not acceptable."""

    code = "invalid"


class NotFound(DataplaneError):
    """The pool, file system, volume, snapshot or device does not exist."""

    code = "not_found"


class AlreadyExists(DataplaneError):
    """An object with that name already exists."""

    code = "exists"


class InUse(DataplaneError):
    """The object is busy: a device already in use, a pool that is not empty, ..."""

    code = "in_use"


class InsufficientDevices(DataplaneError):
    """Too few devices for the requested redundancy, or too many missing to mount."""

    code = "insufficient_devices"


class Unsupported(DataplaneError):
    """The feature is off in this driver (see ``capabilities()["features_off"]``)."""

    code = "unsupported"


class CommandFailed(DataplaneError):
    """An external command (mkfs.btrfs, losetup, mount, ...) failed."""

    code = "command_failed"

    def __init__(self, argv, returncode: int, stderr: str = "", stdout: str = ""):
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr or ""
        self.stdout = stdout or ""
        detail = self.stderr.strip() or self.stdout.strip() or "no output"
        super().__init__(
            f"command {' '.join(map(str, self.argv))!r} failed with exit code {returncode}: {detail}"
        )


class Cancelled(DataplaneError):
    """A long operation (scrub, ...) was cancelled by its caller."""

    code = "cancelled"


class Offline(InUse):
    """The pool is known but not active (not mounted): activate it first.

    Its code is "in_use" (a state conflict, HTTP 409) so planes that map codes need nothing
    new; Python callers can catch ``Offline`` specifically."""

    code = "in_use"
