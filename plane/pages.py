"""Console pages declared as data: a service describes its resource pages (columns, create
form, row actions) in its `pages.py` as a list `PAGES`; the console renders them and the
browser talks to the REST API, so validation, roles and audit are the API's own."""
import json
from dataclasses import dataclass, field

from plane.discovery import service_modules
from plane.roles import can_change, role_of


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
    """Pages of every installed service app, in app order."""
    return [page for _app, module in service_modules("pages") for page in module.PAGES]


_frame = None  # fn(request) -> dict, set by the console: see `frame`


def frame(fn):
    """Register ``fn(request) -> dict``: what every page in the console's frame needs (the
    navigation, the user's role, whether they may change things). The console registers it
    (it knows its own pages too); a service renders its own pages (`console_urls.py`) with
    :func:`page_context` and so never imports the console."""
    global _frame
    _frame = fn
    return fn


def page_context(request, **extra):
    """The template context of a page in the console's frame, plus `extra`. Until the console
    registered its frame (see :func:`frame`), the navigation holds the services' pages."""
    if _frame is not None:
        return {**_frame(request), **extra}
    nav: dict = {}
    for page in all_pages():
        nav.setdefault(page.group, []).append(page)
    return {"nav": nav, "role": role_of(request.user), "can_change": can_change(request.user),
            **extra}
