"""Errors raised by the file service runtime.

Each one carries a message a user can act on; the management plane turns them into 4xx/5xx
answers with a JSON body. None of them is ever swallowed by the runtime.
"""


class FileServiceError(Exception):
    """Base class of every error raised by ``services.file.runtime``."""


class InvalidShareSpec(FileServiceError, ValueError):
    """An export, share, client rule or user name is malformed (bad CIDR, duplicate id...)."""


class PathOutsideFilesystem(InvalidShareSpec):
    """The requested path resolves (after symlinks and ``..``) outside its file system root."""


class FilesystemMissing(InvalidShareSpec):
    """The file system root (or the shared path inside it) does not exist (deleted?)."""


class ConfigValidationError(FileServiceError):
    """The daemon's own checker (``testparm``) refused a rendered config; nothing was installed."""


class ReloadError(FileServiceError):
    """The daemon did not accept a reload, or was not healthy after it."""


class DaemonStartError(FileServiceError):
    """The daemon exited or did not accept connections in time after being started."""


class CommandError(FileServiceError):
    """A helper command (useradd, smbpasswd...) failed; the message includes its stderr."""
