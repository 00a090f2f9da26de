"""Metadata filters: validation and evaluation over a per-field index of stored values.

A filter is a JSON object; every entry must hold (AND):

- ``{"field": value}``: equality with a scalar (string, number, boolean or null);
- ``{"field": {"in": [v, ...]}}`` / ``{"nin": [...]}``: membership;
- ``{"field": {"eq": v}}`` / ``{"ne": v}``;
- ``{"field": {"gte": 1, "lt": 5}}``: numeric range with gt/gte/lt/lte (combine freely).

Equality never confuses booleans with numbers (``true`` is not ``1``). Ranges only match
numeric values. A field that no stored vector has is an error, not an empty result, so
typos surface.
"""

import math

from .errors import InvalidFilter, UnknownFilterField

RANGE_OPS = ("gt", "gte", "lt", "lte")
SET_OPS = ("in", "nin")
OPS = ("eq", "ne") + SET_OPS + RANGE_OPS
MAX_IN = 10_000


def _is_scalar(v):
    return v is None or isinstance(v, (str, bool, int, float))


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _key(v):
    """Hashable key under which booleans and numbers never compare equal."""
    return (type(v) is bool, v)


def _compile_clause(field, cond):
    if not isinstance(cond, dict):
        if not _is_scalar(cond):
            raise InvalidFilter(
                f"filter on {field!r}: use a scalar for equality or an object of operators"
                f" ({', '.join(OPS)}), e.g. {{\"in\": [...]}} for a list")
        cond = {"eq": cond}
    if not cond:
        raise InvalidFilter(f"filter on {field!r} has no operator")
    eq = ne = None
    has_eq = has_ne = False
    inset = ninset = None
    bounds = []
    for op, val in cond.items():
        if op not in OPS:
            raise InvalidFilter(
                f"unknown filter operator {op!r} on {field!r}: use one of {', '.join(OPS)}")
        if op in ("eq", "ne"):
            if not _is_scalar(val):
                raise InvalidFilter(f"filter {field!r} {op}: operand must be a scalar, got {val!r}")
            if op == "eq":
                eq, has_eq = _key(val), True
            else:
                ne, has_ne = _key(val), True
        elif op in SET_OPS:
            if not isinstance(val, list) or not all(_is_scalar(x) for x in val):
                raise InvalidFilter(f"filter {field!r} {op}: operand must be a list of scalars")
            if len(val) > MAX_IN:
                raise InvalidFilter(f"filter {field!r} {op}: at most {MAX_IN} values")
            keys = {_key(x) for x in val}
            if op == "in":
                inset = keys
            else:
                ninset = keys
        else:
            if not _is_number(val) or not math.isfinite(val):
                raise InvalidFilter(
                    f"filter {field!r} {op}: operand must be a finite number, got {val!r}")
            bounds.append((op, val))

    def match(v):
        k = _key(v) if _is_scalar(v) else None
        if has_eq and k != eq:
            return False
        if has_ne and k == ne:
            return False
        if inset is not None and k not in inset:
            return False
        if ninset is not None and k in ninset:
            return False
        if bounds:
            if not _is_number(v):
                return False
            for op, b in bounds:
                if ((op == "gt" and not v > b) or (op == "gte" and not v >= b)
                        or (op == "lt" and not v < b) or (op == "lte" and not v <= b)):
                    return False
        return True

    return match


def compile_filter(flt, field_values):
    """Validate ``flt`` against the stored fields; return [(field, predicate)] or [] for none.

    ``field_values`` maps each field name to {slot: value} for live vectors.
    """
    if flt is None:
        return []
    if not isinstance(flt, dict):
        raise InvalidFilter(f"filter must be an object, got {type(flt).__name__}")
    clauses = []
    for field, cond in flt.items():
        if not isinstance(field, str) or not field:
            raise InvalidFilter(f"filter field names must be non-empty strings, got {field!r}")
        if not field_values.get(field):
            raise UnknownFilterField(
                f"filter field {field!r} is not present in any stored vector's metadata")
        clauses.append((field, _compile_clause(field, cond)))
    return clauses


def evaluate(clauses, field_values):
    """Return the set of slots whose metadata satisfies every clause."""
    if not clauses:
        raise ValueError("evaluate() needs at least one clause")
    # Start from the field with the fewest values: AND can only shrink the set.
    ordered = sorted(clauses, key=lambda c: len(field_values[c[0]]))
    field, pred = ordered[0]
    slots = {s for s, v in field_values[field].items() if pred(v)}
    for field, pred in ordered[1:]:
        if not slots:
            break
        values = field_values[field]
        slots = {s for s in slots if s in values and pred(values[s])}
    return slots
