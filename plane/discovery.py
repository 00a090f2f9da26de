"""The one list of the plane's services, and the lookup of what each one plugs in.

A service is a package (`services/<name>/`, and `vector/`) with any of these modules, found by
name: `apps.py` (installed Django app), `api/urls.py` (`register(router)`), `pages.py`
(`PAGES`), `console_urls.py`, `bootstrap.py`, `health.py`, `metrics.py`, `periodic.py`
(`PERIODIC_TASKS`), `up.py` (options and daemons of `strata up`), `cli.py` (subcommands).
Settings, the supervisor, the CLI and the console all ask here. Storage, the plane's core,
comes first: its bootstrap mounts the pools the others' reconcile needs. No Django at import
(the CLI and the supervisor use this module too).
"""
from importlib import import_module
from importlib.util import find_spec
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE = "services.storage"


def service_packages() -> list[str]:
    """Every service package, the core first."""
    others = sorted(f"services.{p.parent.name}" for p in (ROOT / "services").glob("*/__init__.py"))
    vector = ["vector"] if (ROOT / "vector" / "__init__.py").exists() else []
    return [CORE] + [name for name in others if name != CORE] + vector


def _has(name: str) -> bool:
    try:
        return find_spec(name) is not None
    except ModuleNotFoundError:  # a parent package (e.g. `api`) that does not exist
        return False


def modules_named(submodule: str) -> list:
    """`<service>.<submodule>` of every service that has one, imported."""
    return [import_module(f"{pkg}.{submodule}") for pkg in service_packages()
            if _has(f"{pkg}.{submodule}")]


def service_apps() -> list[str]:
    """The services that are Django apps (they have `apps.py`)."""
    return [pkg for pkg in service_packages() if _has(f"{pkg}.apps")]


def service_modules(submodule: str) -> list:
    """(app config, module) for each installed service app that has `<app>.<submodule>`."""
    from django.apps import apps  # Django only for this lookup: the CLI imports this module

    installed = {app.name: app for app in apps.get_app_configs()}
    return [(installed[pkg], import_module(f"{pkg}.{submodule}")) for pkg in service_apps()
            if pkg in installed and _has(f"{pkg}.{submodule}")]
