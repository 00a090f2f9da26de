"""Service apps plug into the plane by module name: `<app>.api.urls`, `<app>.pages`,
`<app>.bootstrap`, `<app>.health`, `<app>.console_urls`. One lookup serves them all."""
from importlib import import_module
from importlib.util import find_spec

from django.apps import apps


def service_modules(submodule: str) -> list:
    """(app config, module) for each installed service app that has `<app>.<submodule>`."""
    found = []
    for app in apps.get_app_configs():
        name = f"{app.name}.{submodule}"
        if app.name.startswith(("services.", "vector")) and find_spec(name):
            found.append((app, import_module(name)))
    return found
