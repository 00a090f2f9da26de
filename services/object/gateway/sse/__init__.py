"""Server-side encryption at rest: SSE-S3 (``AES256``), SSE-KMS with keys kept by the
appliance (``aws:kms``), SSE-C (customer-provided keys), and bucket default encryption.

Keys. Every object (every part of a multipart upload shares its upload's key) is encrypted
with its own random 256-bit data key. The data key is stored only wrapped (AES-256-GCM,
in the version's index metadata ``meta["sse"]["wk"]``):

- SSE-S3: by a key derived (HKDF-SHA256) from the appliance's master key, which the plane
  generates at first start, keeps sealed in its database and writes into the gateway's
  config file (``sse_master_key``, mode 0600, outside ``data_root``); it is never logged.
- SSE-KMS: by a key derived from the KMS key's own material (the keys the plane manages:
  random 256 bits each, sealed in its database, given to the gateway in its 0600 config as
  ``kms_keys: {id: {"material", "enabled", "aliases", "arn"}}``), or from the master key and
  the id (``aws/s3``, the default when a request names none, and ids listed as
  ``kms_keys: [id, ...]``). A request may name a key by id, ``alias/NAME`` or ARN; another
  is refused with ``KMS.NotFoundException``, a disabled key (new objects and reads of its
  objects alike) with ``KMS.DisabledException``, both 400 as S3 answers them.
- SSE-C: by the customer's key itself, which is never stored: a later request proves it has
  the same key by unwrapping the data key (the GCM tag fails otherwise: ``AccessDenied``),
  as S3 proves it with a salted HMAC of the key.

Cipher layout (DARE-like): the plaintext of a piece (an object, or one multipart part) is cut
into packages of 64 KiB; package ``i`` is sealed with AES-256-GCM under nonce
``np || i`` (``np``: 8 random bytes per piece, recorded in the metadata; 4-byte big-endian
package counter) and stored as ciphertext followed by its 16-byte tag. A range GET reads
and opens only the packages it overlaps (package ``i`` starts at ``i * (64 KiB + 16)``), and
every byte returned has been authenticated: a flipped bit on disk fails the read instead of
returning wrong data. AES-CTR plus a MAC would keep lengths equal but would need a MAC per
range-readable block stored somewhere else; GCM packages keep each tag beside its data.
Random nonce prefixes (not derived from part numbers) matter because a part can be uploaded
again under the same number with the same data key. Small objects (in segments) and large
ones (their own files, or one file per part) use the same layout.

Both stores use this package: a RADOS bucket's encrypted pieces are its data objects (or
inline bytes) holding the same packages, end to end (:func:`read_stream`).

Modules: :mod:`.keys` (master and KMS keys, wrapping), :mod:`.customer` (SSE-C headers),
:mod:`.cipher` (the package format), :mod:`.data_keys` (each object's key: chosen for a write,
unwrapped for a read, described in headers), :mod:`.ranges` (which packages a range reads, and
reading them), :mod:`.bucket_default` (the bucket's default encryption document). The names
below are what the gateway uses.
"""
from .bucket_default import bucket_encryption_xml, parse_bucket_encryption
from .cipher import ChunkCipher, nonce_text, stored_size
from .customer import COPY_CUSTOMER, CUSTOMER, CustomerKey, customer_key
from .data_keys import (BUCKET_KEY_HEADER, KMS_KEY_HEADER, SSE_HEADER, WriteKey, check_read,
                        completed_meta, data_key, describe, etag_for, for_upload, for_write,
                        headers_for, refuse_on_read, requested, same_as)
from .keys import DEFAULT_KMS_KEY, Keyring
from .ranges import open_decrypting, physical_ranges, physical_size, read_stream

__all__ = [
    "BUCKET_KEY_HEADER", "COPY_CUSTOMER", "CUSTOMER", "DEFAULT_KMS_KEY", "KMS_KEY_HEADER",
    "SSE_HEADER", "ChunkCipher", "CustomerKey", "Keyring", "WriteKey", "bucket_encryption_xml",
    "check_read", "completed_meta", "customer_key", "data_key", "describe", "etag_for",
    "for_upload", "for_write", "headers_for", "nonce_text", "open_decrypting",
    "parse_bucket_encryption", "physical_ranges", "physical_size", "read_stream",
    "refuse_on_read", "requested", "same_as", "stored_size",
]
