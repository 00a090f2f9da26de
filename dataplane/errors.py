"""Errors raised by the dataplane.

Every error carries a short machine-readable ``code`` (the management plane turns it into the
``error`` field of a 4xx/5xx JSON body) and a message a user can act on. They belong to the
domain error tree of `plumbing.errors`: each is also an ``Invalid``, ``NotFound`` or
``Conflict`` where it is one, which is how the plane picks the status.
"""
from plumbing import errors


class DataplaneError(errors.StrataError):
    """Base class of every dataplane error."""


class InvalidArgument(DataplaneError, errors.Invalid):
    """A name, size, option or stream the caller gave is not acceptable."""

    code = "invalid"


class NotFound(DataplaneError, errors.NotFound):
    """The pool, file system, volume, snapshot or device does not exist."""

    code = "not_found"


class AlreadyExists(DataplaneError, errors.Conflict):
    """An object with that name already exists."""

    code = "exists"


class InUse(DataplaneError, errors.Conflict):
    """The object is busy: a device already in use, a pool that is not empty, ..."""

    code = "in_use"


class InsufficientDevices(DataplaneError, errors.Invalid):
    """Too few devices for the requested redundancy, or too many missing to mount."""

    code = "insufficient_devices"


class Unsupported(DataplaneError, errors.Invalid):
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


class Cancelled(DataplaneError, errors.Conflict):
    """A long operation (scrub, ...) was cancelled by its caller."""

    code = "cancelled"


class Offline(InUse):
    """The pool is known but not active (not mounted): activate it first.

    Its code is "in_use" (a state conflict, HTTP 409) so planes that map codes need nothing
    new; Python callers can catch ``Offline`` specifically."""

    code = "in_use"


class Unreachable(DataplaneError, errors.Unavailable):
    """A daemon or cluster the driver needs does not answer (spdk_tgt, a Ceph monitor)."""

    code = "unavailable"
