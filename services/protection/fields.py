"""Secrets at rest: a model field that keeps its text sealed in the database.

Replication peer tokens and backup target secret keys must be usable by the plane (they are
sent to the peer or used to sign S3 requests), so they cannot be hashed. They are sealed
with the appliance key (Fernet, ``plane.secrets``, the same box as S3 secret
keys): the column holds only the token, Python code sees the plain text, and the API never
returns them (write-only fields). Equality lookups on a sealed field never match (every
sealing differs); nothing filters on them.

A value sealed under another ``SECRET_KEY`` (the data directory's ``secret_key`` was lost)
reads as an empty string, logged: the peer or the S3 endpoint then refuses it and the user
sets the secret again; saving the row meanwhile keeps the sealed text as it was.
"""
import logging

from django.db import models

from plane.secrets import SecretUnreadable, seal, unseal

log = logging.getLogger(__name__)


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
