"""Bounds of integer fields in the API, so a number too large for its database column is a 400
naming the field (never an overflow and a 500), and the schema says so."""
INT64 = 2**63 - 1     # BigIntegerField: byte counts, sizes, offsets, steps
INT32 = 2**31 - 1     # PositiveIntegerField: counts such as keep_last
