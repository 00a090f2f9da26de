"""Secrets at rest: the sealed text field now lives in the plane's kernel
(:mod:`plane.secrets`), where every service finds it; this name stays for the migrations
that refer to it."""
from plane.secrets import SealedTextField, UnreadableSecret  # noqa: F401  (migrations' path)
