"""A Strata S3 gateway subprocess for backup tests (the kit's), on a free port with its data
in a temporary directory."""
import os

from tests.kit import Gateway

ACCESS, SECRET = "BACKUPKEY", "backup-secret-key"


class S3Gateway(Gateway):
    """``start()`` the gateway; ``endpoint``, ``client()``; ``stop()`` in a finally."""

    def __init__(self, workdir: str):
        super().__init__(workdir, {
            ACCESS: {"secret_key": SECRET, "user": "backup", "admin": True}},
            data_root=os.path.join(workdir, "s3"))

    def client(self):
        from services.protection.objstore import s3_client
        return s3_client(self.endpoint, ACCESS, SECRET)
