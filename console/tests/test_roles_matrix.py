"""Every API operation, asked by each role: viewers read and change nothing, operators change
storage but not users, admins may do all. The permission check comes before the request is
looked at, so every operation answers 403 (or not) whatever its body and path values."""
import re

import pytest
from drf_spectacular.generators import SchemaGenerator

pytestmark = pytest.mark.django_db

ADMIN_ONLY = ("/api/v1/users/",                # user management
              "/api/v1/vector-collections/import/")  # reads a path on the appliance
ANY_SIGNED_IN = ("/api/v1/tokens/", "/api/v1/me/")  # each user's own
PUBLIC = ("/api/v1/health", "/metrics",
          "/api/v1/nodes/join/")               # a host joining: its join token is the check
# A node's own endpoints: its node credential, no user's token (401 for every role).
NODE_ONLY = ("/api/v1/nodes/heartbeat/", "/api/v1/nodes/self/", "/api/v1/nodes/self/ceph/")
ADMIN_WRITES = ("/api/v1/nodes/",)             # every role reads the cluster; admins run it
# Reads that hand out a replica's whole data (a send stream): for peers, which are operators.
READS_FOR_OPERATORS = ("/failback-stream/",)
READS_SENT_AS_POST = ("/search/",)  # vector searches: every role may run them
SKIPPED = {("post", "/api/v1/tokens/")}  # replaces the caller's token (test_signin covers it)


def _value(param: dict) -> str:
    """A path value the URL accepts (so the request reaches the permission check)."""
    pattern = param.get("schema", {}).get("pattern")
    for candidate in ("x", "1", "ab", "x/y"):
        if not pattern or re.fullmatch(pattern.strip("^$"), candidate):
            return candidate
    raise AssertionError(f"no sample value for {param}")


def _operations():
    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    for path, ops in sorted(paths.items()):
        for method, op in ops.items():
            if method not in ("get", "post", "put", "patch", "delete") or \
                    (method, path) in SKIPPED:
                continue
            for param in op.get("parameters", []):
                if param["in"] == "path":
                    path = path.replace("{%s}" % param["name"], _value(param))
            yield method, path


OPERATIONS = list(_operations())


def expected_to_pass(role: str, method: str, path: str) -> bool:
    if path.startswith(PUBLIC + ANY_SIGNED_IN) or path.endswith(READS_SENT_AS_POST) or \
            role == "admin":
        return True
    if path.startswith(ADMIN_ONLY):
        return False
    if path.startswith(ADMIN_WRITES):
        return method == "get"
    if any(part in path for part in READS_FOR_OPERATORS):
        return role == "operator"
    return method == "get" or role == "operator"


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_each_role_gets_exactly_what_it_may(role, api, viewer_api, operator_api):
    client = {"viewer": viewer_api, "operator": operator_api, "admin": api}[role]
    wrong = []
    for method, path in OPERATIONS:
        status = getattr(client, method)(path, {}, format="json").status_code
        if path in NODE_ONLY:
            if status != 401:
                wrong.append(f"{method.upper()} {path}: {status}, not 401")
            continue
        if (status == 403) == expected_to_pass(role, method, path):
            wrong.append(f"{method.upper()} {path}: {status}")
    assert not wrong, "\n".join(wrong)
