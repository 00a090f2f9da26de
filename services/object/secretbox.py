"""Seal S3 secret keys for the database (Fernet; key derived from Django's SECRET_KEY).

SigV4 needs the secret itself to check a signature, so secrets cannot be hashed like
passwords. Sealing keeps them out of database dumps and backups; the plaintext exists only
in the gateway's 0600 config file and in the one answer to the create request.
"""
import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


class SecretUnreadable(Exception):
    """A sealed secret cannot be opened (the plane's SECRET_KEY changed since it was sealed)."""


def _fernet() -> Fernet:
    digest = hashlib.sha256(b"strata-s3-secret-keys:" + settings.SECRET_KEY.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def seal(secret: str) -> str:
    """The secret encrypted and authenticated, as text."""
    return _fernet().encrypt(secret.encode()).decode()


def unseal(sealed: str) -> str:
    """The secret back from :func:`seal`'s output."""
    try:
        return _fernet().decrypt(sealed.encode()).decode()
    except InvalidToken:
        raise SecretUnreadable(
            "An S3 secret key cannot be decrypted: the plane's SECRET_KEY (data_dir/secret_key "
            "or STRATA_SECRET_KEY) changed since it was created. Restore it, or delete the key "
            "and create a new one.") from None
