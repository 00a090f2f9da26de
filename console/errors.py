"""Every API error is JSON: {"error": code, "detail": message}, plus "fields" for validation."""
from django.core.exceptions import PermissionDenied
from django.db.models import ProtectedError, RestrictedError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_handler

from dataplane.errors import DataplaneError

DATAPLANE_STATUS = {
    "invalid": status.HTTP_400_BAD_REQUEST,
    "insufficient_devices": status.HTTP_400_BAD_REQUEST,
    "unsupported": status.HTTP_400_BAD_REQUEST,
    "not_found": status.HTTP_404_NOT_FOUND,
    "exists": status.HTTP_409_CONFLICT,
    "in_use": status.HTTP_409_CONFLICT,
    "cancelled": status.HTTP_409_CONFLICT,
}


class Conflict(exceptions.APIException):
    """The request is valid but the current state forbids it (in use, has dependents)."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


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


def exception_handler(exc, context):
    if isinstance(exc, DataplaneError):
        code = getattr(exc, "code", "dataplane_error")
        return Response(
            {"error": code, "detail": str(exc)},
            status=DATAPLANE_STATUS.get(code, status.HTTP_500_INTERNAL_SERVER_ERROR),
        )
    if isinstance(exc, (ProtectedError, RestrictedError)):
        users = sorted({str(o) for o in exc.protected_objects if o is not None})[:10]
        exc = Conflict(f"It is still used by {', '.join(users)}; delete or change those first.")
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
    else:
        detail = exc.detail if isinstance(exc, exceptions.APIException) else str(exc)
        code = getattr(exc, "default_code", "error")
        if isinstance(exc, exceptions.APIException):
            codes = exc.get_codes()
            code = codes if isinstance(codes, str) else code
        body = {"error": code, "detail": str(detail)}
    response.data = body
    return response
