"""Every mutating API call is written to the audit log, whatever its result."""
import json
import math

from rest_framework.exceptions import APIException

from plane.models import AuditEvent

SECRET_WORDS = ("password", "secret", "token", "key")
MUTATING = ("POST", "PUT", "PATCH", "DELETE")


def _redact(value, depth=0):
    """Secrets masked, and a summary rather than bulk data: lists become their length
    (an upsert of vectors is not copied into the audit log), long strings are cut and
    non-finite numbers (which JSON columns refuse) become text."""
    if isinstance(value, dict):
        if depth > 2:
            return f"{{{len(value)} keys}}"
        return {
            _text(k): "***" if any(w in k.lower() for w in SECRET_WORDS)
            else _redact(v, depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list):
        if len(value) <= 8 and all(isinstance(v, (str, int, bool)) for v in value):
            return [_redact(v, depth + 1) for v in value]
        return f"[{len(value)} items]"
    if isinstance(value, str):
        value = _text(value)
        return value[:200] + "..." if len(value) > 200 else value
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _body(request) -> dict:
    # Only JSON bodies are recorded; binary streams (replication chunks) are not read here.
    if not request.content_type.startswith("application/json"):
        return {}
    try:
        data = json.loads(request.body or b"{}")
    except (ValueError, UnicodeDecodeError):
        return {}
    return _redact(data) if isinstance(data, dict) else {}


class AuditMiddleware:
    """Records method, path, user, status and the redacted request body of API writes."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.method not in MUTATING or not request.path.startswith("/api/"):
            return self.get_response(request)
        body = _body(request)  # read before the view consumes the stream
        response = self.get_response(request)
        if getattr(response, "audited", True) is False and response.status_code < 400:
            return response   # routine and frequent (a node's heartbeat): not an act to log
        user = getattr(request, "user", None)
        drf_user = _drf_user(response)
        user = drf_user if drf_user is not None and drf_user.is_authenticated else user
        code = response.status_code
        AuditEvent.objects.create(
            username=user.get_username() if user and user.is_authenticated else "",
            method=request.method,
            path=_text(request.path)[:500],
            action=_text(f"{request.method} {request.path}")[:200],
            status_code=code,
            result="ok" if code < 400 else ("denied" if code in (401, 403) else "error"),
            detail={"request": body, "response": _response_summary(response)},
            remote_addr=request.META.get("REMOTE_ADDR", "")[:64],
        )
        return response


def _text(value: str) -> str:
    return value.replace("\x00", "\\0")  # the database cannot hold NUL characters


def _drf_user(response):
    """The user DRF authenticated inside the view (the token's), if it got that far: a
    request refused before authentication (a bad format suffix, a bad token) has none."""
    drf_request = getattr(response, "renderer_context", {}).get("request")
    try:
        return getattr(drf_request, "user", None)
    except APIException:  # reading .user would authenticate now, and fail again
        return None


def _response_summary(response):
    data = getattr(response, "data", None)
    if isinstance(data, dict):
        if "error" in data:
            return {"error": _text(str(data.get("error"))),
                    "detail": _text(str(data.get("detail")))[:500]}
        return _redact({k: data[k] for k in ("id", "name", "state", "job") if k in data})
    return {}
