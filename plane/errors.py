"""Every API error is JSON: {"error": code, "detail": message}, plus "fields" for validation.

The rule for statuses: 400 when the request itself is wrong (whatever the state), 409 when it
is well-formed but conflicts with the current state (a name already taken, in use, has
dependents, busy), 404 when what it names does not exist, 503 when something it needs is not
running, 507 when the pool that must hold the data is full (`no_space`: an ENOSPC/EDQUOT
anywhere below is answered so, never 500).

Services and tasks raise the domain errors of `plumbing.errors` (the dataplane's included);
this handler is the one place that turns them into HTTP statuses."""
from django.core.exceptions import PermissionDenied
from django.db.models import ProtectedError, RestrictedError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_handler

from plumbing import errors

STATUS = [  # the first class the error is an instance of decides
    (errors.Invalid, status.HTTP_400_BAD_REQUEST),
    (errors.Forbidden, status.HTTP_403_FORBIDDEN),
    (errors.NotFound, status.HTTP_404_NOT_FOUND),
    (errors.Conflict, status.HTTP_409_CONFLICT),
    (errors.Unavailable, status.HTTP_503_SERVICE_UNAVAILABLE),
    (errors.NoSpace, status.HTTP_507_INSUFFICIENT_STORAGE),
]


def status_of(exc: errors.StrataError) -> int:
    return next((code for cls, code in STATUS if isinstance(exc, cls)),
                status.HTTP_500_INTERNAL_SERVER_ERROR)


def _flatten(detail, prefix="") -> list[str]:
    if isinstance(detail, dict):
        out = []
        for key, value in detail.items():
            name = "" if key == "non_field_errors" else f"{prefix}{key}"
            out += _flatten(value, f"{name}." if name else "")
        return out
    if isinstance(detail, list):
        return [m for item in detail for m in _flatten(item, prefix)]
    return [f"{prefix[:-1]}: {detail}" if prefix else str(detail)]


def _codes(codes) -> set:
    if isinstance(codes, dict):
        return {c for v in codes.values() for c in _codes(v)}
    if isinstance(codes, list):
        return {c for v in codes for c in _codes(v)}
    return {codes}


def exception_handler(exc, context):
    if isinstance(exc, (ProtectedError, RestrictedError)):
        users = sorted({str(o) for o in exc.protected_objects if o is not None})[:10]
        exc = errors.Conflict(f"It is still used by {', '.join(users)}; delete or change those first.")
    if not isinstance(exc, errors.StrataError) and errors.is_disk_full(exc):
        exc = errors.NoSpace(f"The pool holding this data is full ({exc}); free space (delete "
                             "files, snapshots or objects) or grow the pool, then retry.")
    if isinstance(exc, errors.StrataError):
        return Response(exc.to_dict(), status=status_of(exc))
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        body = {"error": "invalid", "detail": "; ".join(_flatten(exc.detail))}
        if isinstance(exc.detail, dict):
            body["fields"] = exc.detail
        if _codes(exc.get_codes()) == {"unique"}:  # a name already taken: current state
            body["error"] = "exists"
            response.status_code = status.HTTP_409_CONFLICT
    else:
        detail = exc.detail if isinstance(exc, exceptions.APIException) else str(exc)
        code = getattr(exc, "default_code", "error")
        if isinstance(exc, exceptions.APIException):
            codes = exc.get_codes()
            code = codes if isinstance(codes, str) else code
        body = {"error": code, "detail": str(detail)}
    response.data = body
    return response
