"""Strata's S3-compatible gateway: an ASGI app (uvicorn + uvloop + httptools), no Django.

Run ``python -m services.object.gateway --config CONFIG.json --host HOST --port PORT [--workers N]``. The
config contract, worker processes, the admin interface, storage, lifecycle, snapshots, performance and the
module layers (request handling on top of the store) are described in
``services/object/README.md``.
"""
