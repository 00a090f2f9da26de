"""Recognise checkpoints written without Strata's API (no Django: this reads bytes).

- PyTorch DCP: a finished save ends with `.metadata`, a pickled
  `torch.distributed.checkpoint.metadata.Metadata` whose `storage_data` maps every item to
  `_StorageInfo(relative_path, offset, length)`. We read it with a restricted unpickler that
  builds inert stand-ins for torch's classes, so the plane neither needs torch nor runs code
  from a user-writable file; every file must then be at least `offset + length` long.
- Orbax: a step directory is final when it holds `commit_success.txt` (object stores) or when
  the temporary `<step>.orbax-checkpoint-tmp-<n>` directory has been renamed to `<step>`.
"""
import io
import os
import pickle
import re
from dataclasses import dataclass, field

DCP_METADATA = ".metadata"
ORBAX_SUCCESS = "commit_success.txt"
ORBAX_METADATA = ("_CHECKPOINT_METADATA", "_METADATA")
ORBAX_TMP = ".orbax-checkpoint-tmp-"
STEP_DIR_RE = re.compile(r"^(?:step[-_]?|checkpoint[-_]?|ckpt[-_]?)?(\d{1,18})"
                         r"(?P<tmp>\.orbax-checkpoint-tmp-\d+)?$")


class NotACheckpoint(ValueError):
    """A `.metadata` file that is not a DCP metadata pickle (or refers to foreign code)."""


class _Inert:
    """Stand-in for a class named in DCP metadata: keeps its constructor args and state."""

    def __init__(self, *args, **kwargs):
        self._args = args

    def __setstate__(self, state):
        if (isinstance(state, tuple) and len(state) == 2
                and all(s is None or isinstance(s, dict) for s in state)):
            state, slots = state  # (__dict__, slots) as pickle writes it for slotted classes
            for k, v in (slots or {}).items():
                object.__setattr__(self, k, v)
        if isinstance(state, dict):
            for k, v in state.items():
                object.__setattr__(self, k, v)
        else:  # a class with its own __getstate__ (TensorProperties): keep it opaque
            object.__setattr__(self, "_state", state)


_INERT_CLASSES: dict = {}


def _inert(module: str, name: str):
    key = (module, name)
    if key not in _INERT_CLASSES:
        _INERT_CLASSES[key] = type(name, (_Inert,), {"__module__": module})
    return _INERT_CLASSES[key]


def _path(*parts):
    return "/".join(str(p) for p in parts)


class _MetadataUnpickler(pickle.Unpickler):
    """Allows only what DCP metadata refers to; anything else is refused, never imported."""

    SAFE = {
        ("torch", "Size"): tuple,
        ("torch.serialization", "_get_layout"): str,
        ("collections", "OrderedDict"): dict,
        ("builtins", "set"): set,
        ("builtins", "frozenset"): frozenset,
        ("pathlib", "PosixPath"): _path,
        ("pathlib", "PurePosixPath"): _path,
        ("pathlib", "WindowsPath"): _path,
        ("pathlib", "PureWindowsPath"): _path,
    }

    def find_class(self, module, name):
        if (module, name) in self.SAFE:
            return self.SAFE[(module, name)]
        if module == "torch" and (name.startswith(("float", "int", "uint", "bool", "complex",
                                                   "bfloat", "half", "double", "long",
                                                   "short", "cfloat", "qint", "quint"))):
            return f"torch.{name}"  # a dtype: its name is all we need
        if module.startswith("torch.distributed.checkpoint"):
            return _inert(module, name)
        raise NotACheckpoint(f"DCP metadata refers to {module}.{name}, which is not allowed")


def read_dcp_extents(metadata_path: str) -> dict:
    """{relative file name: bytes it must hold} from a DCP `.metadata` file."""
    with open(metadata_path, "rb") as f:
        return dcp_extents(f.read(), metadata_path)


def dcp_extents(data: bytes, where: str = ".metadata") -> dict:
    """{relative file name: bytes it must hold} from the bytes of a DCP `.metadata`."""
    try:
        meta = _MetadataUnpickler(io.BytesIO(data)).load()
    except NotACheckpoint:
        raise
    except Exception as exc:  # truncated or garbage pickle
        raise NotACheckpoint(f"{where} is not readable DCP metadata: {exc}") from exc
    storage = getattr(meta, "storage_data", None)
    if not isinstance(storage, dict):
        raise NotACheckpoint(f"{where} has no storage_data: not DCP metadata")
    need: dict = {}
    for info in storage.values():
        rel, off, length = (getattr(info, "relative_path", None), getattr(info, "offset", None),
                            getattr(info, "length", None))
        if not isinstance(rel, str) or not isinstance(off, int) or not isinstance(length, int):
            raise NotACheckpoint(f"{where} has a storage entry without path/offset/length")
        if rel.startswith("/") or ".." in rel.split("/"):
            raise NotACheckpoint(f"{where} names a file outside its directory: {rel}")
        need[rel] = max(need.get(rel, 0), off + length)
    return need


@dataclass
class Detection:
    """What a directory holds: a finished checkpoint (with the manifest to verify), a save
    in progress, or nothing we recognise."""

    format: str  # dcp | orbax | ""
    finished: bool
    manifest: list = field(default_factory=list)
    note: str = ""


def _all_files(root: str) -> list:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for fn in sorted(filenames):
            full = os.path.join(dirpath, fn)
            if os.path.isfile(full):
                out.append({"name": os.path.relpath(full, root), "size": os.path.getsize(full)})
    return out


def detect(path: str) -> Detection:
    """Classify a step directory. A finished checkpoint's manifest lists what must be there;
    the caller still verifies it (a DCP shard may be short even though `.metadata` exists)."""
    try:
        entries = set(os.listdir(path))
    except FileNotFoundError:
        return Detection("", False, note="directory is gone")

    def read_metadata() -> bytes:
        with open(os.path.join(path, DCP_METADATA), "rb") as f:
            return f.read()

    return classify(os.path.basename(os.path.normpath(path)), entries, read_metadata,
                    lambda: _all_files(path))


def classify(name: str, entries: set, read_metadata, list_files,
             object_store: bool = False) -> Detection:
    """Classify a step "directory" from its top-level entry names.

    `read_metadata()` returns the bytes of `.metadata`, `list_files()` every file as
    {name, size}. On an object store only `commit_success.txt` marks a finished Orbax step
    (there is no rename; `_CHECKPOINT_METADATA` is written before the data is complete).
    """
    if ORBAX_TMP in name:
        return Detection("orbax", False, note="Orbax temporary directory: save in progress")
    if DCP_METADATA in entries:
        data = read_metadata()
        try:
            extents = dcp_extents(data, f"{name}/{DCP_METADATA}")
        except NotACheckpoint as exc:
            return Detection("dcp", False, note=str(exc))
        manifest = [{"name": rel, "size": size} for rel, size in sorted(extents.items())]
        manifest.append({"name": DCP_METADATA, "size": len(data)})
        return Detection("dcp", True, manifest)
    if any(e.endswith(".distcp") for e in entries):
        return Detection("dcp", False, note="DCP shards without .metadata: save in progress")
    markers = {ORBAX_SUCCESS} if object_store else {ORBAX_SUCCESS, *ORBAX_METADATA}
    if entries & markers:
        return Detection("orbax", True, list_files())
    if object_store and entries & set(ORBAX_METADATA):
        return Detection("orbax", False, note="Orbax step without commit_success.txt yet")
    return Detection("", False, note="no checkpoint recognised")


def step_of(dirname: str):
    """(step, is_orbax_tmp) for a step directory name, or None."""
    m = STEP_DIR_RE.match(dirname)
    if not m:
        return None
    return int(m.group(1)), bool(m.group("tmp"))
