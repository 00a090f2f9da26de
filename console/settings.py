"""Django settings for the Strata management plane.

Everything comes from the environment so that `strata up` (embedded defaults: SQLite and a
private redis-server in the data directory) and deployments (PostgreSQL, a shared Redis) use
the same file:

- STRATA_DATA_DIR: where state lives (default ./var)
- STRATA_DATABASE_URL: postgres://user@host:port/name, or unset for SQLite in the data dir
- STRATA_REDIS_URL: Celery broker; default a unix socket in the data dir (started by `strata up`)
- STRATA_DATAPLANE: driver for new pools: auto | local | directory
- STRATA_NODE_NAME: this host's node name in the cluster (default: the host name)
- STRATA_NODE_AGENT: set by `strata node run` for the processes it starts: this process serves
  what the cluster places on this node (services.nodes.placement), not every resource
- STRATA_NODE_DATABASE_URL, STRATA_NODE_REDIS_URL: what joining nodes are told to use when
  it is not what the plane uses (a plane on the database's host may reach it on loopback)
"""
import json
import os
import secrets
import socket
from pathlib import Path
from urllib.parse import urlparse

from plane.discovery import modules_named, service_apps

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("STRATA_DATA_DIR", BASE_DIR / "var")).resolve()
DATA_DIR.mkdir(mode=0o711, parents=True, exist_ok=True)


def _take_away(path: Path, bits: int) -> None:
    """Clear permission ``bits`` of ``path`` when it is ours and has any of them."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return
    if st.st_uid == os.geteuid() and st.st_mode & bits:
        path.chmod(st.st_mode & 0o7777 & ~bits)


# The data directory lists nothing to other local accounts (0711: they may pass through it to
# a share's directory, as smbd does as the share's user, but not read it); put right on every
# start of an older install made with `mkdir` (0755).
_take_away(DATA_DIR, 0o066)


def _private_sqlite(database: Path) -> Path:
    """The SQLite database and its -wal/-shm are 0600 (SQLite gives -wal and -shm the
    database file's mode): they hold the sealed secrets, token digests and password hashes.
    Made so before the database is first opened, and put right on older installs."""
    try:
        os.close(os.open(database, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass
    for suffix in ("", "-wal", "-shm"):
        _take_away(Path(f"{database}{suffix}"), 0o077)
    return database


def _secret_key() -> str:
    if os.environ.get("STRATA_SECRET_KEY"):
        return os.environ["STRATA_SECRET_KEY"]
    path = DATA_DIR / "secret_key"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(50))
    return path.read_text().strip()


def _database(url: str | None) -> dict:
    if not url:
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": _private_sqlite(DATA_DIR / "strata.sqlite3"),
            # worker, beat and web server write concurrently: WAL and immediate transactions
            # turn "database is locked" into short waits.
            "OPTIONS": {
                "timeout": 30,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    u = urlparse(url)
    if u.scheme not in ("postgres", "postgresql"):
        raise ValueError(f"STRATA_DATABASE_URL: unsupported scheme {u.scheme!r} (use postgres://)")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": u.path.lstrip("/") or "strata",
        "USER": u.username or "postgres",
        "PASSWORD": u.password or "",
        "HOST": u.hostname or "127.0.0.1",
        "PORT": str(u.port or 5432),
        "CONN_MAX_AGE": 0,
    }


SECRET_KEY = _secret_key()
DEBUG = os.environ.get("STRATA_DEBUG") == "1"
ALLOWED_HOSTS = ["*"]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("STRATA_CSRF_ORIGINS", "").split(",") if o]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "plane",
    "console",
]


# Every service with a Django app, the core (storage) first; see plane/discovery.py.
INSTALLED_APPS += service_apps()

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "plane.audit.AuditMiddleware",
]

ROOT_URLCONF = "console.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "console" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]
ASGI_APPLICATION = "console.asgi.application"
WSGI_APPLICATION = "console.wsgi.application"

DATABASES = {"default": _database(os.environ.get("STRATA_DATABASE_URL"))}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# Vector upserts and checkpoint manifests can be large JSON bodies.
DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024 * 1024

STATIC_URL = "/static/"
STATIC_ROOT = DATA_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/console/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "plane.signin.AuditedTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["plane.roles.RolePermission"],
    # JSON bodies only (the console, CLI and SDK send JSON): form encodings have no null, no
    # types and read an empty field as "not given", so `pool=` picked the default pool and a
    # boolean took any spelling. A form body is a 415. Uploads declare their own parser.
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_FILTER_BACKENDS": ["plane.api.filters.FilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "plane.api.pagination.Pagination",
    "PAGE_SIZE": 100,
    "EXCEPTION_HANDLER": "plane.errors.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Strata API",
    "DESCRIPTION": "Unified storage appliance: pools, file systems, volumes, snapshots, jobs.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums",
                             "plane.api.schema.document_errors"],
    # Several models have a field named "state" with different choices: name each set.
    "ENUM_NAME_OVERRIDES": {
        "JobStateEnum": "plane.models.Job.State",
        "StorageStateEnum": "services.storage.models.State",  # pool, fs, volume, snapshot
        "ShareStateEnum": "services.file.models.ApplyState",  # NFS export, SMB share/user
        "CheckpointVersionStateEnum": "services.checkpoints.models.CheckpointVersion.State",
    },
}

# Celery: broker only; results live on Job rows.
CELERY_BROKER_URL = os.environ.get(
    "STRATA_REDIS_URL", f"redis+socket://{DATA_DIR / 'run' / 'redis.sock'}"
)
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A message a worker took stays unacknowledged (in Redis) until its task is done; if the
# worker dies (kill -9, a node lost), any live worker puts it back on its queue once it is
# STRATA_TASK_VISIBILITY_TIMEOUT s old (kombu's default: an hour), checking every 10 s. A task
# running longer than that is handed out again while it runs: a job's second run finds its row
# claimed and does nothing (plane/jobs.py); the other tasks take seconds.
STRATA_TASK_VISIBILITY_TIMEOUT = float(os.environ.get("STRATA_TASK_VISIBILITY_TIMEOUT", "300"))
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": STRATA_TASK_VISIBILITY_TIMEOUT,
                                   "unacked_restore_interval": 10,
                                   "unacked_restore_throttle": 1}
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
# Each service declares its periodic tasks in its `periodic.py` (PERIODIC_TASKS).
CELERY_BEAT_SCHEDULE = {name: task for module in modules_named("periodic")
                        for name, task in module.PERIODIC_TASKS.items()}

STRATA_DATAPLANE = os.environ.get("STRATA_DATAPLANE", "auto")
# The cluster (services/nodes): this host's node name (a Job records it), what joining nodes
# are told, and the services a node can be assigned (those with daemons in `up.py`).
STRATA_NODE_NAME = os.environ.get("STRATA_NODE_NAME") or socket.gethostname().lower()
STRATA_NODE_DATABASE_URL = os.environ.get("STRATA_NODE_DATABASE_URL", "")
STRATA_NODE_AGENT = os.environ.get("STRATA_NODE_AGENT", "") == "1"
STRATA_NODE_REDIS_URL = os.environ.get("STRATA_NODE_REDIS_URL", "")
STRATA_NODE_SERVICES = [m.__name__.split(".")[-2] for m in modules_named("up")]
# Options of `strata up` for the services (ports and such), see plumbing.process.DaemonSpec.
SERVICE_OPTIONS = json.loads(os.environ.get("STRATA_SERVICE_OPTIONS") or "{}")
# `strata up --tls`: the console's session and CSRF cookies travel over HTTPS only
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = bool(SERVICE_OPTIONS.get("tls_cert"))
# A job row is updated at most this often while it reports progress.
STRATA_JOB_PROGRESS_INTERVAL = 0.5
# Stale jobs (plane/tasks.py, the sweeper, every STRATA_JOB_SWEEP_INTERVAL seconds): a running
# job writes a heartbeat every STRATA_JOB_HEARTBEAT s and counts as cut off (its worker died)
# after STRATA_JOB_STALE_RUNNING s without one; a pending job older than STRATA_JOB_STALE_PENDING
# s whose message is in no queue of the broker nor held by a worker is queued again.
STRATA_JOB_HEARTBEAT = float(os.environ.get("STRATA_JOB_HEARTBEAT", "10"))
STRATA_JOB_STALE_RUNNING = float(os.environ.get("STRATA_JOB_STALE_RUNNING", "60"))
STRATA_JOB_STALE_PENDING = float(os.environ.get("STRATA_JOB_STALE_PENDING", "120"))
STRATA_JOB_SWEEP_INTERVAL = float(os.environ.get("STRATA_JOB_SWEEP_INTERVAL", "30"))
CELERY_BEAT_SCHEDULE["sweep-jobs"] = {"task": "plane.sweep_jobs",
                                      "schedule": STRATA_JOB_SWEEP_INTERVAL}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("STRATA_LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
