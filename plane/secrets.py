"""Secrets sealed at rest with the plane's SECRET_KEY (see `plumbing.secretbox`): S3 secret
keys, backup targets' and peers' credentials, CHAP secrets.

Secrets the plane must use itself (to sign S3 requests, to log in to a peer, to hand CHAP
secrets to tgtd) cannot be hashed; :class:`SealedTextField` keeps them sealed in the
database: the column holds only the sealed text, Python code sees the plain text, and the API
never returns them (write-only fields). Equality lookups on a sealed field never match (every
sealing differs); nothing filters on them.

A value sealed under another ``SECRET_KEY`` (the data directory's ``secret_key`` was lost)
reads as an empty string, logged: the peer, the S3 endpoint or the initiator then refuses it
and the user sets the secret again; saving the row meanwhile keeps the sealed text as it was.
"""
import logging

from django.conf import settings
from django.db import models

from plumbing import secretbox
from plumbing.secretbox import SecretUnreadable  # noqa: F401  (callers catch it from here)

log = logging.getLogger(__name__)


def seal(secret: str) -> str:
    return secretbox.seal(secret, settings.SECRET_KEY)


def unseal(sealed: str) -> str:
    return secretbox.unseal(sealed, settings.SECRET_KEY)


class UnreadableSecret(str):
    """An empty stand-in for a secret that cannot be unsealed; keeps the sealed text."""

    def __new__(cls, sealed: str):
        obj = super().__new__(cls, "")
        obj.sealed = sealed
        return obj


class SealedTextField(models.TextField):
    """Text stored sealed (Fernet with the appliance key), plain in Python."""

    def from_db_value(self, value, expression, connection):
        if not value:
            return value
        try:
            return unseal(value)
        except SecretUnreadable:
            log.error("%s of a %s row cannot be unsealed (the plane's SECRET_KEY changed); "
                      "set it again", self.name, self.model.__name__)
            return UnreadableSecret(value)

    def get_prep_value(self, value):
        if isinstance(value, UnreadableSecret):
            return value.sealed
        value = super().get_prep_value(value)
        return seal(value) if value else value
