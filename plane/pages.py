"""Console pages declared as data: a service describes its resource pages (columns, create
form, row actions) in its `pages.py` as a list `PAGES`; the console renders them and the
browser talks to the REST API, so validation, roles and audit are the API's own."""
import json
from dataclasses import dataclass, field

from django.contrib.auth.models import User

from plane.discovery import service_modules
from plane.models import AuditEvent, Job
from plane.roles import ADMIN, ROLES, can_change, role_of


@dataclass
class Column:
    key: str                  # attribute path on the row object, dots allowed ("pool.name")
    label: str
    kind: str = "text"        # text | bytes | state | time | list


@dataclass
class FormField:
    name: str
    label: str
    kind: str = "text"        # text | number | bytes | select | checkbox | lines | password
    choices: object = field(default_factory=list)  # a list, or a callable giving one
    required: bool = False
    help: str = ""
    default: str = ""


@dataclass
class Action:
    """A button on each row: POST (or DELETE) to `path` (`{key}` is the row's lookup)."""

    label: str
    path: str
    method: str = "POST"
    fields: list = field(default_factory=list)   # FormField asked for in a small form
    confirm_name: bool = False                   # ask the user to type the row's name
    watch_job: bool = False                      # the answer is a job: show its progress
    body: dict = field(default_factory=dict)     # fixed fields sent too ("{key}" replaced)
    confirm: str = ""                            # OK/Cancel first, no fields ("{name}" = row)

    def body_json(self) -> str:
        return json.dumps(self.body)


@dataclass
class Page:
    slug: str
    title: str
    group: str
    api: str                                     # collection URL, e.g. /api/v1/pools/
    queryset: object                             # callable returning the rows
    columns: list
    form: list = field(default_factory=list)     # create form; empty = no create
    actions: list = field(default_factory=list)
    lookup: str = "name"
    deletable: bool = True
    help: str = ""
    detail: str = ""                             # prefix of a page per row: detail + key + "/"

    def rows(self):
        """(lookup key, name to confirm deletes with, [(value, column)]) per row."""
        return [(_get(obj, self.lookup), getattr(obj, "name", None) or _get(obj, self.lookup),
                 [(_get(obj, c.key), c) for c in self.columns])
                for obj in self.queryset()]


def _get(obj, path: str):
    for part in path.split("."):
        obj = getattr(obj, part, None) if obj is not None else None
        if callable(obj) and not hasattr(obj, "all"):
            obj = obj()
        elif hasattr(obj, "all") and callable(obj.all):
            obj = [str(x) for x in obj.all()]
    return obj


def all_pages() -> list:
    """Pages of every installed service app, in app order, then the plane's own."""
    return [page for _app, module in service_modules("pages") for page in module.PAGES] + \
        SYSTEM_PAGES


def nav(user) -> dict:
    """The console's navigation for ``user``: pages by group."""
    groups: dict = {}
    for page in all_pages():
        if page.slug in ADMIN_ONLY and role_of(user) != ADMIN:
            continue
        groups.setdefault(page.group, []).append(page)
    return groups


def page_context(request, **extra):
    """What every console page needs (the navigation, the role, whether it may change),
    plus ``extra``. Services render their own pages (`console_urls.py`) with it too."""
    return {"nav": nav(request.user), "role": role_of(request.user),
            "can_change": can_change(request.user), **extra}


SYSTEM_PAGES = [  # the plane's own: jobs, audit log, users
    Page(slug="jobs", title="Jobs", group="System", api="/api/v1/jobs/", lookup="id",
         queryset=lambda: Job.objects.all()[:200], deletable=False,
         columns=[Column("id", "ID"), Column("kind", "Kind"), Column("target_name", "Target"),
                  Column("state", "State", "state"), Column("progress", "Progress", "progress"),
                  Column("transfer_line", "Transferred"), Column("message", "Message"), Column("error", "Error"),
                  Column("created_at", "Created", "time")],
         actions=[Action("Cancel", "/api/v1/jobs/{key}/cancel/")]),
    Page(slug="audit", title="Audit log", group="System", api="/api/v1/audit/", lookup="id",
         queryset=lambda: AuditEvent.objects.all()[:200], deletable=False,
         columns=[Column("time", "When", "time"), Column("username", "Who"),
                  Column("action", "What"), Column("status_code", "Status"),
                  Column("result", "Result", "state")]),
    Page(slug="users", title="Users and roles", group="System", api="/api/v1/users/",
         lookup="username", queryset=lambda: User.objects.prefetch_related("groups").order_by("id"),
         columns=[Column("username", "User"), Column("groups", "Role", "list"),
                  Column("is_superuser", "Admin"), Column("last_login", "Last login", "time")],
         form=[FormField("username", "User name", required=True),
               FormField("password", "Password", "password", required=True),
               FormField("role", "Role", "select", choices=list(ROLES), default="viewer")]),
]
ADMIN_ONLY = {"users"}  # pages only admins see
