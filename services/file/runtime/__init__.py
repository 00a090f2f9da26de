"""File service runtime: NFS-Ganesha and Samba config builders, renderers and supervisors.

No Django here. The management plane converts its rows into the dataclasses of
:mod:`.specs`, checks paths with :func:`resolve_share_path`, and calls
``NfsServer.apply(exports)`` / ``SmbServer.apply(shares)``. See README.md in this folder.
"""

from .errors import (
                     CommandError,
                     ConfigValidationError,
                     DaemonStartError,
                     FileServiceError,
                     FilesystemMissing,
                     InvalidShareSpec,
                     PathOutsideFilesystem,
                     ReloadError,
)
from .ganesha import build_ganesha_config, render_ganesha_conf
from .nfs_server import NfsServer, nfs_null_ping
from .paths import resolve_share_path
from .samba import build_smb_config, dfree_scripts, render_smb_conf
from .smb_server import SmbServer, validate_smb_conf
from .smb_users import (
                     delete_smb_user,
                     delete_unix_user,
                     ensure_unix_user,
                     set_smb_password,
                     unix_user_exists,
)
from .specs import (
                     DEFAULT_SNAPSHOT_FORMAT,
                     CephExportSource,
                     NfsClientRule,
                     NfsCluster,
                     NfsExport,
                     NfsSettings,
                     SmbSettings,
                     SmbShare,
)

__all__ = [
                     "DEFAULT_SNAPSHOT_FORMAT",
                     "CephExportSource",
                     "CommandError",
                     "ConfigValidationError",
                     "DaemonStartError",
                     "FileServiceError",
                     "FilesystemMissing",
                     "InvalidShareSpec",
                     "NfsClientRule",
                     "NfsCluster",
                     "NfsExport",
                     "NfsServer",
                     "NfsSettings",
                     "PathOutsideFilesystem",
                     "ReloadError",
                     "SmbServer",
                     "SmbSettings",
                     "SmbShare",
                     "build_ganesha_config",
                     "build_smb_config",
                     "delete_smb_user",
                     "delete_unix_user",
                     "dfree_scripts",
                     "ensure_unix_user",
                     "nfs_null_ping",
                     "render_ganesha_conf",
                     "render_smb_conf",
                     "resolve_share_path",
                     "set_smb_password",
                     "unix_user_exists",
                     "validate_smb_conf",
]
