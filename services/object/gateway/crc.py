"""Combining CRCs: the CRC of A+B from crc(A), crc(B) and len(B), without reading the bytes
again (zlib's ``crc32_combine`` method, for any reflected CRC whose initial value and final
xor are all ones: CRC32, CRC32C and CRC64NVME). A multipart upload's FULL_OBJECT checksum is
its parts' CRCs combined in order.

Arithmetic is in GF(2) polynomials modulo the CRC's polynomial, in the reflected bit order
(the top bit of the register is x^0): ``crc(A+B) = crc(A) * x^(8*len(B)) + crc(B)``.
"""
from __future__ import annotations

from functools import lru_cache

# reflected polynomials and widths
POLYNOMIALS = {"crc32": (0xEDB88320, 32), "crc32c": (0x82F63B78, 32), "crc64nvme": (0x9A6C9329AC4BC9B5, 64)}


def _multmodp(a: int, b: int, poly: int, width: int) -> int:
    """a * b modulo the polynomial (reflected)."""
    m = 1 << (width - 1)
    p = 0
    while True:
        if a & m:
            p ^= b
            if (a & (m - 1)) == 0:
                break
        m >>= 1
        b = (b >> 1) ^ poly if b & 1 else b >> 1
    return p


@lru_cache(maxsize=None)
def _x2n_table(algorithm: str) -> tuple[int, ...]:
    """x^(2^n) modulo the polynomial, n = 0..width-1."""
    poly, width = POLYNOMIALS[algorithm]
    p = 1 << (width - 2)  # x^1
    table = [p]
    for _ in range(1, width):
        p = _multmodp(p, p, poly, width)
        table.append(p)
    return tuple(table)


def _x8nmodp(algorithm: str, n: int) -> int:
    """x^(8n) modulo the polynomial."""
    poly, width = POLYNOMIALS[algorithm]
    table = _x2n_table(algorithm)
    p = 1 << (width - 1)  # x^0
    k = 3
    while n:
        if n & 1:
            p = _multmodp(table[k % width], p, poly, width)
        n >>= 1
        k += 1
    return p


def combine(algorithm: str, crc_a: int, crc_b: int, len_b: int) -> int:
    """The CRC of A followed by B."""
    poly, width = POLYNOMIALS[algorithm]
    return _multmodp(_x8nmodp(algorithm, len_b), crc_a, poly, width) ^ crc_b


def combine_all(algorithm: str, parts: list[tuple[int, int]]) -> int:
    """The CRC of the parts in order, from each part's (crc, length)."""
    total = 0
    for value, length in parts:
        total = combine(algorithm, total, value, length)
    return total
