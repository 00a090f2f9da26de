"""Every mutating API call is written to the audit log, whatever its result."""
import json

from console.models import AuditEvent

SECRET_WORDS = ("password", "secret", "token", "key")
MUTATING = ("POST", "PUT", "PATCH", "DELETE")


def _redact(value):
    if isinstance(value, dict):
        return {
            k: "***" if any(w in k.lower() for w in SECRET_WORDS) else _redact(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_redact(v) for v in value]
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
        user = getattr(request, "user", None)
        # DRF authenticates inside the view: the token user is on the DRF request.
        drf_user = getattr(getattr(response, "renderer_context", {}).get("request"), "user", None)
        user = drf_user if drf_user is not None and drf_user.is_authenticated else user
        code = response.status_code
        AuditEvent.objects.create(
            username=user.get_username() if user and user.is_authenticated else "",
            method=request.method,
            path=request.path[:500],
            action=f"{request.method} {request.path}"[:200],
            status_code=code,
            result="ok" if code < 400 else ("denied" if code in (401, 403) else "error"),
            detail={"request": body, "response": _response_summary(response)},
            remote_addr=request.META.get("REMOTE_ADDR", "")[:64],
        )
        return response


def _response_summary(response):
    data = getattr(response, "data", None)
    if isinstance(data, dict):
        if "error" in data:
            return {"error": data.get("error"), "detail": str(data.get("detail"))[:500]}
        return _redact({k: data[k] for k in ("id", "name", "state", "job") if k in data})
    return {}
