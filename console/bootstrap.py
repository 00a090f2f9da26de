"""First start and every start of `strata up`: roles, the admin user and its credentials
file, then each service's own bootstrap (storage first: the default pool, pools brought back
online after a restart)."""
import json
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import Group, User

from plane import tokens
from plane.discovery import service_modules
from plane.roles import ROLES
from plumbing.atomic import write_atomic


def write_private_json(path: Path, data: dict) -> None:
    """Write JSON atomically and durably with mode 0600 (it holds secrets)."""
    write_atomic(path, json.dumps(data, indent=2) + "\n", mode=0o600)


def credentials_path() -> Path:
    return settings.DATA_DIR / "credentials.json"


def tls_trust() -> dict:
    """How clients trust the appliance's TLS certificate (`strata up --tls`): ``ca_bundle``
    (the certificate file, to give as the CA bundle) and its SHA-256 ``tls_fingerprint``;
    both None without TLS."""
    options = getattr(settings, "SERVICE_OPTIONS", None) or {}
    return {"ca_bundle": options.get("tls_cert"), "tls_fingerprint": options.get("tls_fingerprint")}


def ensure_admin(api_url: str, console_url: str) -> dict:
    """Create the admin user on first start; (re)write credentials.json with its secrets."""
    for role in ROLES:
        Group.objects.get_or_create(name=role)
    path = credentials_path()
    creds = json.loads(path.read_text()) if path.exists() else {}
    user = User.objects.filter(username=creds.get("username") or "admin").first()
    password = creds.get("password")
    if user is None or not password or not user.check_password(password):
        password = secrets.token_urlsafe(16)
        user = user or User(username="admin")
        user.is_superuser = user.is_staff = True
        user.set_password(password)
        user.save()
        user.groups.set([Group.objects.get(name="admin")])
    # the plane keeps only the token's digest: credentials.json (0600) holds the key
    token = creds.get("token")
    if not tokens.holds(user, token):
        if token:
            print(f"admin API token: the one in {path} is not {user.username}'s any more; "
                  "a new one is there now (the plane keeps only its digest)")
        token = tokens.issue(user)
    creds.update({"api_url": api_url, "console_url": console_url,
                  "username": user.username, "password": password, "token": token})
    creds.update(tls_trust())
    write_private_json(path, creds)
    return creds


def run_service_shutdowns() -> None:
    """Each service's `bootstrap.py` `shutdown()`, in reverse order (storage, which releases
    the pools the others' data lives on, last), once `strata up` stopped every daemon."""
    for _app, module in reversed(service_modules("bootstrap")):
        if hasattr(module, "shutdown"):
            module.shutdown()


def run_service_bootstraps(creds: dict) -> list[str]:
    """Each service app's `bootstrap.py` `bootstrap(creds) -> dict` (e.g. the admin's S3 keys,
    exports reconciled into the daemons `strata up` just started); its answer is added to
    credentials.json."""
    ran = []
    for app, module in service_modules("bootstrap"):
        creds.update(module.bootstrap(creds) or {})
        ran.append(app.label)
    write_private_json(credentials_path(), creds)
    return ran
