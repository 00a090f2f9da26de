"""Tiering: tier moves (a file system or volume to another pool, keeping its name) and the
API of the shared background I/O budget. See README.md; other services import only
``public.py``."""
