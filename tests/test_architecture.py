"""The import rules of ARCHITECTURE.md, checked on the source (no import is executed).

Layers, from the bottom: `plumbing` (imports nothing of Strata), `dataplane`, `plane` (the
management plane's kernel), `services.storage` (the core), the other services and `vector`,
`console` (the project on top, which finds services through `plane.discovery` only). Imports
go down only; a service imports another (not the core) only through its `public` module;
no module imports itself back through others (no cycles, inside a package or across); project
imports inside functions carry a comment that says why; code that touches bytes imports no
Django; HTTP types stay in the API layer (services raise `plumbing.errors`).
"""
import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("plumbing", "dataplane", "plane", "services", "vector", "console")
RANK = {"plumbing": 0, "dataplane": 1, "plane": 2, "services.storage": 3, "service": 4,
        "console": 5}
# Code that touches bytes: no Django, DRF or Celery (it runs, is tested and profiled alone);
# and the CSI driver, a client of the plane's REST API that runs on Kubernetes nodes.
BYTE_PATHS = ("plumbing", "dataplane", "services.object.gateway", "services.block.transports",
              "services.file.runtime", "vector.engine", "services.csi")
DJANGO = ("django", "rest_framework", "celery", "drf_spectacular", "django_filters")
# Modules that may use HTTP types: the API layer (with its error handler, permissions,
# sign-in and audit middleware) and the project on top.
HTTP_OK = ("plane.errors", "plane.roles", "plane.signin", "plane.audit", "console")
# Named exceptions to the rules above, each with its reason.
EXCEPTIONS: dict = {}


def _modules() -> dict:
    found = {}
    for top in PACKAGES:
        for path in (ROOT / top).rglob("*.py"):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            if "migrations" in parts:
                continue
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _is_test(name: str) -> bool:
    return ".tests" in name or name.split(".")[-1].startswith(("test_", "conftest"))


def _resolve(name: str) -> str | None:
    """The project module an imported name lives in (a package's attribute: the package)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(name: str, path: Path):
    """(imported module or None for a third-party one, top-level name, line, in a function,
    has a comment) for every import statement of the module."""
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    is_pkg = path.name == "__init__.py"
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                pkg = pkg[:len(pkg) - node.level + 1]
                base = ".".join(pkg + ([base] if base else []))
            names = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        inner, up = False, node
        while up in parents:
            up = parents[up]
            if isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = True
                break
        text = lines[node.lineno - 1] + (lines[node.lineno - 2] if node.lineno > 1 else "")
        commented = "#" in lines[node.lineno - 1] or lines[node.lineno - 2].strip().startswith("#")
        for full in names:
            target = _resolve(full) if full.split(".")[0] in PACKAGES else None
            if target != name:
                yield target, full.split(".")[0], node.lineno, inner, commented, text


def _layer(module: str) -> tuple[str, int]:
    top = module.split(".")[0]
    if top == "services":
        pkg = ".".join(module.split(".")[:2])
        return pkg, RANK["services.storage"] if pkg == "services.storage" else RANK["service"]
    if top == "vector":
        return "vector", RANK["service"]
    return top, RANK[top]


def _violations(check) -> list[str]:
    out = []
    for name, path in sorted(MODULES.items()):
        if _is_test(name):
            continue
        for target, top, line, inner, commented, _text in _imports(name, path):
            problem = check(name, target, top, inner, commented)
            where = f"{path.relative_to(ROOT)}:{line}"
            if problem and EXCEPTIONS.get(where) is None:
                out.append(f"{where}: {problem}")
    return sorted(set(out))


def test_imports_go_down_only_and_across_services_through_public_modules():
    def check(name, target, top, inner, commented):
        if target is None:
            return None
        (src_pkg, src_rank), (dst_pkg, dst_rank) = _layer(name), _layer(target)
        if src_pkg == dst_pkg:
            return None
        if dst_rank > src_rank:
            return f"{name} imports {target}, a layer above it"
        if dst_rank == src_rank and not target.endswith(".public"):
            return f"{name} imports {target}; use {dst_pkg}.public"
        return None

    problems = _violations(check)
    assert not problems, "\n" + "\n".join(problems)


def test_no_import_cycles():
    edges = defaultdict(set)
    for name, path in MODULES.items():
        if not _is_test(name):
            edges[name] |= {t for t, *_ in _imports(name, path) if t and not _is_test(t)}
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in list(edges):
        if v not in index:
            visit(v)
    assert not cycles, "\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_project_imports_inside_functions_say_why():
    def check(name, target, top, inner, commented):
        if target is not None and inner and not commented:
            return f"imports {target} inside a function without a comment saying why"
        return None

    problems = _violations(check)
    assert not problems, "\n" + "\n".join(problems)


def test_code_that_touches_bytes_imports_no_django():
    def check(name, target, top, inner, commented):
        if name.startswith(BYTE_PATHS) and top in DJANGO:
            return f"{name} imports {top}"
        if name.startswith(BYTE_PATHS) and target and not target.startswith(
                BYTE_PATHS + ("plumbing",)) and _layer(target)[1] >= RANK["plane"]:
            return f"{name} imports {target}, which is Django"
        return None

    problems = _violations(check)
    assert not problems, "\n" + "\n".join(problems)


def test_services_raise_domain_errors_not_http_types():
    def check(name, target, top, inner, commented):
        if top != "rest_framework" or name.startswith(HTTP_OK):
            return None
        if ".api" in name or name.endswith((".pages", ".serializers")):
            return None
        return f"{name} imports rest_framework outside the API layer"

    problems = _violations(check)
    assert not problems, "\n" + "\n".join(problems)
