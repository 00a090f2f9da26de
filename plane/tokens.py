"""API tokens kept as digests: the database holds the SHA-256 of each key, never the key, so
that a copy of the database (a dump, a backup, a local account that could read the file)
gives no way in. The key is shown once, when it is made.

A key is 160 random bits, so one unsalted SHA-256 is enough (no password stretching: there
is nothing to guess), and a lookup by digest is one index probe."""
import hashlib
import secrets

from django.db import transaction

from plane.models import ApiToken


def digest_of(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def issue(user) -> str:
    """A new token for ``user`` (its old one stops working at once); returns the key, which
    is not kept anywhere by the plane."""
    key = secrets.token_hex(20)
    with transaction.atomic():
        ApiToken.objects.filter(user=user).delete()
        ApiToken.objects.create(user=user, digest=digest_of(key), prefix=key[:8])
    return key


def holds(user, key: str) -> bool:
    """True when ``key`` is ``user``'s current token."""
    return bool(key) and ApiToken.objects.filter(user=user, digest=digest_of(key)).exists()


def token_for(key: str) -> ApiToken | None:
    """The token whose key is ``key`` (with its user), or None."""
    return ApiToken.objects.select_related("user").filter(digest=digest_of(key)).first()
