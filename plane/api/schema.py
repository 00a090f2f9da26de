"""The OpenAPI schema tells the truth about errors: every operation documents the JSON error
body of the statuses it can answer (see plane/errors.py for the rule)."""

ERROR = {
    "type": "object",
    "properties": {
        "error": {"type": "string", "description": "A short machine-readable code."},
        "detail": {"type": "string", "description": "What went wrong, for a person."},
        "fields": {"type": "object", "additionalProperties": True,
                   "description": "Per-field messages of a validation error."},
        "kept_by": {"type": "string", "description": (
            "409 kept_by_service: the service that keeps the file system for its own data.")},
    },
    "required": ["error", "detail"],
}
WHY = {
    "400": "The request is wrong whatever the state: a bad value, size or combination.",
    "401": "No valid token or session.",
    "403": "The caller's role does not allow this.",
    "404": "What the path, the query or the body names does not exist.",
    "409": "Well-formed, but it conflicts with the current state (name taken, in use, busy).",
    "503": "Something the request needs is not running or not reachable.",
    "507": "The pool that must hold the data is full.",
}


def document_errors(result, generator, request, public):
    """drf-spectacular postprocessing hook: add the `Error` schema and the error responses."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR
    ref = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            public_op = not operation.get("security") or {} in operation["security"]
            # any operation may name something that does not exist (in its path, or a pool
            # or a bucket in its query or body) and may need a daemon that is down (a GET
            # of a bucket's objects needs the S3 gateway): 404 and 503 everywhere
            codes = ["400", "404", "503"]
            if not public_op:
                codes += ["401", "403"]
            if method != "get":
                codes += ["409", "507"]
            responses = operation.setdefault("responses", {})
            for code in codes:
                responses.setdefault(code, {"description": WHY[code], "content": ref})
            for code, response in responses.items():   # an error a view declares itself
                if code in WHY and "content" not in response:
                    response["content"] = ref
    return result
