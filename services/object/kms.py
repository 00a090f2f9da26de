"""SSE-KMS keys kept by the appliance: create (random material, sealed at rest), enable,
disable, find by id, alias or ARN. Every change rewrites the gateway's config file after its
transaction commits (``service.write_gateway_config``), so the gateway learns of it on its
next request without a database query."""
import base64
import secrets
import uuid

from django.db import IntegrityError, transaction

from plane.secrets import seal
from plumbing.errors import Conflict, NotFound
from services.object.models import KmsKey
from services.object.service import write_gateway_config


def normalize_alias(alias: str | None) -> str | None:
    """``alias/NAME`` from NAME or ``alias/NAME`` (None for none)."""
    if not alias:
        return None
    return alias if alias.startswith("alias/") else f"alias/{alias}"


def create_kms_key(*, alias: str | None = None, description: str = "", created_by=None) -> KmsKey:
    """A new KMS key with fresh random material (sealed at rest); the gateway takes it from its
    next request. Its id is a UUID, as AWS KMS's are."""
    with transaction.atomic():
        try:
            with transaction.atomic():
                key = KmsKey.objects.create(
                    key_id=str(uuid.uuid4()), alias=normalize_alias(alias), description=description,
                    created_by=created_by, sealed_material=seal(base64.b64encode(secrets.token_bytes(32)).decode()))
        except IntegrityError:
            raise Conflict(f"A KMS key with alias {normalize_alias(alias)} exists already.",
                           code="AlreadyExistsException") from None
        transaction.on_commit(write_gateway_config)
    return key


def set_kms_key_enabled(key: KmsKey, enabled: bool) -> KmsKey:
    """Enable or disable a key (disabled: its objects cannot be written or read until it is
    enabled again; nothing is re-encrypted)."""
    with transaction.atomic():
        key.enabled = enabled
        key.save(update_fields=["enabled", "updated_at"])
        transaction.on_commit(write_gateway_config)
    return key


def update_kms_key(key: KmsKey, changes: dict) -> KmsKey:
    """Change a key's description or alias (the gateway takes the new alias at once)."""
    with transaction.atomic():
        for name in ("alias", "description"):
            if name in changes:
                setattr(key, name, normalize_alias(changes[name]) if name == "alias" else changes[name])
        key.save()
        transaction.on_commit(write_gateway_config)
    return key


def find_kms_key(ref: str) -> KmsKey:
    """A key by id, alias (``alias/NAME`` or NAME) or ARN (NotFound otherwise)."""
    tail = ref.split(":", 5)[-1] if ref.startswith("arn:") else ref
    tail = tail[4:] if tail.startswith("key/") else tail
    key = KmsKey.objects.filter(key_id=tail).first() or KmsKey.objects.filter(alias=normalize_alias(tail)).first()
    if key is None:
        raise NotFound(f"No KMS key {ref}.")
    return key
