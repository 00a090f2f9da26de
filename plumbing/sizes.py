"""Sizes as people write them, one rule everywhere (CLI options, ``image:SIZE`` devices, pool
sizes of `strata up`): a bare number is bytes; ``K M G T P`` and ``KiB MiB GiB TiB PiB`` are
powers of 1024 (``10G`` = ``10GiB`` = 10 * 2**30); ``kB MB GB TB PB`` are powers of 1000
(``5GB`` = 5 * 10**9), as on a disk's label. Case does not matter; anything else is refused."""
from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from plumbing.errors import Invalid

UNITS = {"": 1, "b": 1,
         "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50,
         "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "pib": 1 << 50,
         "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")
EXAMPLES = "10G or 10GiB = 10 * 2**30, 10GB = 10 * 10**9, 4096 bytes"


def parse_size(text) -> int:
    """Bytes from ``4096``, ``512M``/``512MiB`` (512 * 2**20) or ``5GB`` (5 * 10**9).

    An int is taken as bytes. Raises :class:`plumbing.errors.Invalid` for anything else, for
    a size that is not positive and for a fraction of a byte."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        match = _SIZE_RE.match(str(text).lower())
        if not match or match.group(2) not in UNITS:
            raise Invalid(f"invalid size {text!r}: use {EXAMPLES}")
        try:
            exact = Decimal(match.group(1)) * UNITS[match.group(2)]
        except InvalidOperation:
            raise Invalid(f"invalid size {text!r}: use {EXAMPLES}") from None
        if exact != exact.to_integral_value():
            raise Invalid(f"invalid size {text!r}: not a whole number of bytes")
        value = int(exact)
    if value <= 0:
        raise Invalid(f"invalid size {text!r}: must be positive")
    return value
