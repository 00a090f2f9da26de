"""Secrets sealed at rest with the plane's SECRET_KEY (see `plumbing.secretbox`): S3 secret
keys, backup targets' and peers' credentials."""
from django.conf import settings

from plumbing import secretbox
from plumbing.secretbox import SecretUnreadable  # noqa: F401  (callers catch it from here)


def seal(secret: str) -> str:
    return secretbox.seal(secret, settings.SECRET_KEY)


def unseal(sealed: str) -> str:
    return secretbox.unseal(sealed, settings.SECRET_KEY)
