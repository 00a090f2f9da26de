"""Seal secrets for storage at rest (Fernet, with a key derived from the appliance's secret).

SigV4 and CHAP need the secret itself to check a signature, so such secrets cannot be hashed
like passwords. Sealing keeps them out of database dumps and backups."""
import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken


class SecretUnreadable(Exception):
    """A sealed secret cannot be opened (the appliance's secret changed since it was sealed)."""


def _fernet(appliance_secret: str) -> Fernet:
    digest = hashlib.sha256(b"strata-s3-secret-keys:" + appliance_secret.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def seal(secret: str, appliance_secret: str) -> str:
    """The secret encrypted and authenticated, as text."""
    return _fernet(appliance_secret).encrypt(secret.encode()).decode()


def unseal(sealed: str, appliance_secret: str) -> str:
    """The secret back from :func:`seal`'s output."""
    try:
        return _fernet(appliance_secret).decrypt(sealed.encode()).decode()
    except InvalidToken:
        raise SecretUnreadable(
            "A sealed secret cannot be decrypted: the plane's SECRET_KEY (data_dir/secret_key "
            "or STRATA_SECRET_KEY) changed since it was created. Restore it, or delete what "
            "holds the secret and create it again.") from None
