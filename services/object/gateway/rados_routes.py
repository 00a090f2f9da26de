"""Requests on the RADOS store: its own multipart handlers (:mod:`.rados_multipart`), and 501
NotImplemented, naming the reason, for the features it does not have yet (never an answer
from a half-built feature).
"""
from __future__ import annotations

import dataclasses

from . import rados_multipart
from .rados_store import not_implemented
from .routes import Route

# S3 operations over features this store does not have yet: what is missing
UNSUPPORTED = {
    **dict.fromkeys(("RestoreObject",), "the capacity tier"),
}


def adapt(route: Route) -> Route:
    """``route`` on this store (NotImplemented when the request needs what it lacks)."""
    what = UNSUPPORTED.get(route.operation)
    if what:
        async def refuse(gw, req, bucket):
            raise not_implemented(what)
        return dataclasses.replace(route, handler=refuse)
    handler = rados_multipart.HANDLERS.get(route.operation)
    return dataclasses.replace(route, handler=handler) if handler else route
