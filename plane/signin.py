"""Sign-ins: every failed one is audited, and an address or a user name with too many recent
failures is refused for a while (console and browsable-API sign-in forms, and API tokens).

The audit log is the counter: failures are rows with action ``sign-in failed``, so the limit
holds across the web server's processes and restarts."""
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.dispatch import receiver
from django.forms import ValidationError
from django.utils import timezone
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from plane.models import AuditEvent
from plane.tokens import token_for

FAILED = "sign-in failed"


def limit() -> int:
    return int(getattr(settings, "STRATA_SIGNIN_FAILURES", 10))


def window() -> timedelta:
    return timedelta(seconds=int(getattr(settings, "STRATA_SIGNIN_WINDOW", 300)))


def address(request) -> str:
    return (request.META.get("REMOTE_ADDR", "") if request is not None else "")[:64]


def _record(request, username: str, action: str, result: str, status: int, how: str) -> None:
    AuditEvent.objects.create(
        username=(username or "")[:150], method=getattr(request, "method", "") or "",
        path=(getattr(request, "path", "") or "")[:500], action=action, status_code=status,
        result=result, detail={"how": how}, remote_addr=address(request))


def blocked(request, username: str = "") -> str:
    """Why a sign-in is refused now ("" when it is not): too many failures from this address
    or for this user name within the window."""
    recent = AuditEvent.objects.filter(action=FAILED, time__gte=timezone.now() - window())
    addr = address(request)
    minutes = max(1, int(window().total_seconds() // 60))
    if addr and recent.filter(remote_addr=addr).count() >= limit():
        return (f"Too many failed sign-ins from {addr}; try again in {minutes} minutes.")
    if username and recent.filter(username=username).count() >= limit():
        return f"Too many failed sign-ins for {username}; try again in {minutes} minutes."
    return ""


@receiver(user_login_failed)
def _audit_failure(sender, credentials, request=None, **kwargs):
    _record(request, credentials.get("username", ""), FAILED, "denied", 401, "password")


@receiver(user_logged_in)
def _audit_success(sender, request, user, **kwargs):
    _record(request, user.get_username(), "sign-in", "ok", 200, "password")


class SignInForm(AuthenticationForm):
    """The sign-in form, refused outright while the address or user name is blocked."""

    def clean(self):
        why = blocked(self.request, self.data.get("username", ""))
        if why:
            raise ValidationError(why, code="throttled")
        return super().clean()


class HashedTokenAuthentication(TokenAuthentication):
    """``Authorization: Token KEY``, checked against the stored digests (plane.tokens)."""

    def authenticate_credentials(self, key):
        token = token_for(key)
        if token is None:
            raise AuthenticationFailed("Invalid token.")
        if not token.user.is_active:
            raise AuthenticationFailed("User inactive or deleted.")
        return token.user, token


class AuditedTokenAuthentication(HashedTokenAuthentication):
    """Token auth whose failures count as failed sign-ins (a guessed token is audited, and an
    address that keeps guessing is refused)."""

    def authenticate(self, request):
        try:
            return super().authenticate(request)
        except AuthenticationFailed:
            why = blocked(request)
            _record(request, "", FAILED, "denied", 401, "token")
            if why:
                raise AuthenticationFailed(why, code="throttled") from None
            raise
