"""Ceph's Python bindings (rados, rbd, cephfs) for whatever Python runs Strata.

Debian ships them as compiled modules for its own ``/usr/bin/python3`` in
``/usr/lib/python3/dist-packages``; a virtualenv of the same minor version can load them from
there without putting the rest of that directory on ``sys.path``.
"""

import importlib
import importlib.util
import sys
from pathlib import Path

from ..errors import Unsupported

SYSTEM_DIRS = ("/usr/lib/python3/dist-packages",)


def load(name: str):
    """Import binding ``name`` ("rados", "rbd" or "cephfs"); Unsupported when it is missing."""
    if name in sys.modules:
        return sys.modules[name]
    try:
        return importlib.import_module(name)
    except ImportError:
        pass
    tag = f"cpython-{sys.version_info.major}{sys.version_info.minor}"
    for directory in SYSTEM_DIRS:
        for path in sorted(Path(directory).glob(f"{name}.{tag}-*.so")):
            if name != "rados":
                load("rados")   # rbd and cephfs import it at load time
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except ImportError as exc:
                del sys.modules[name]
                raise Unsupported(f"Ceph's {name} binding at {path} does not load: {exc}") from exc
            return module
    raise Unsupported(f"Ceph's Python binding {name!r} is not installed for Python "
                      f"{sys.version_info.major}.{sys.version_info.minor}: apt-get install "
                      f"python3-{name}")
