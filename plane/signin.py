"""Sign-ins: every failed one is audited, and a user name that keeps failing from one address
backs off there (console and browsable-API sign-in forms; invalid API tokens likewise, per
address).

Throttling is per user name *and* address, so that an attacker cannot lock anyone out: their
failures for ``admin`` from their address lock only that pair, while ``admin`` (or anyone else)
signs in from any other address, and from theirs once the back-off has passed. After
``STRATA_SIGNIN_FAILURES`` failures of a pair since its last success (within a day), the pair
is refused for ``STRATA_SIGNIN_BACKOFF`` seconds after its last failure, doubling with each
further failure up to ``STRATA_SIGNIN_BACKOFF_MAX``. Attempts refused meanwhile are audited
(``sign-in throttled``) but do not count as failures, so a lock cannot be stretched by
hammering it. A valid API token always works: a token cannot be guessed (160 random bits), so
invalid ones are only audited and slowed the same way per address.

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

FAILED, THROTTLED, SIGNED_IN = "sign-in failed", "sign-in throttled", "sign-in"
LOOKBACK = timedelta(days=1)  # failures older than this are forgotten


def limit() -> int:
    return int(getattr(settings, "STRATA_SIGNIN_FAILURES", 5))


def backoff() -> float:
    return float(getattr(settings, "STRATA_SIGNIN_BACKOFF", 60))


def backoff_max() -> float:
    return float(getattr(settings, "STRATA_SIGNIN_BACKOFF_MAX", 3600))


def address(request) -> str:
    return (request.META.get("REMOTE_ADDR", "") if request is not None else "")[:64]


def _record(request, username: str, action: str, result: str, status: int, how: str) -> None:
    AuditEvent.objects.create(
        username=(username or "")[:150], method=getattr(request, "method", "") or "",
        path=(getattr(request, "path", "") or "")[:500], action=action, status_code=status,
        result=result, detail={"how": how}, remote_addr=address(request))


def wait_seconds(username: str, addr: str) -> float:
    """How long sign-ins of ``username`` from ``addr`` are refused from now (0: not)."""
    now = timezone.now()
    pair = AuditEvent.objects.filter(username=username[:150], remote_addr=addr,
                                     time__gte=now - LOOKBACK)
    last_ok = pair.filter(action=SIGNED_IN).order_by("-time").values_list(
        "time", flat=True).first()
    failures = pair.filter(action=FAILED)
    if last_ok is not None:
        failures = failures.filter(time__gt=last_ok)
    count = failures.count()
    if count < limit():
        return 0.0
    last = failures.order_by("-time").values_list("time", flat=True).first()
    delay = min(backoff() * 2 ** (count - limit()), backoff_max())
    return max(0.0, (last + timedelta(seconds=delay) - now).total_seconds())


def blocked(request, username: str = "") -> str:
    """Why a sign-in of ``username`` (an API token: "") from this request's address is
    refused now, or "" when it is not."""
    addr = address(request)
    wait = wait_seconds(username, addr)
    if not wait:
        return ""
    what = f"for {username}" if username else "with invalid API tokens"
    return (f"Too many failed sign-ins {what} from {addr or 'this address'}; try again in "
            f"{int(wait) + 1} seconds (other addresses are not affected).")


@receiver(user_login_failed)
def _audit_failure(sender, credentials, request=None, **kwargs):
    _record(request, credentials.get("username", ""), FAILED, "denied", 401, "password")


@receiver(user_logged_in)
def _audit_success(sender, request, user, **kwargs):
    _record(request, user.get_username(), SIGNED_IN, "ok", 200, "password")


class SignInForm(AuthenticationForm):
    """The sign-in form, refused outright (and audited) while the user name backs off at
    this address; the password is then not even checked."""

    def clean(self):
        username = self.data.get("username", "")
        why = blocked(self.request, username)
        if why:
            _record(self.request, username, THROTTLED, "denied", 429, "password")
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
    """Token auth whose failures are audited as failed sign-ins, and an address that keeps
    sending invalid tokens is told to back off (a valid token always works)."""

    def authenticate(self, request):
        try:
            return super().authenticate(request)
        except AuthenticationFailed:
            why = blocked(request)
            if why:
                _record(request, "", THROTTLED, "denied", 401, "token")
                raise AuthenticationFailed(why, code="throttled") from None
            _record(request, "", FAILED, "denied", 401, "token")
            raise
