"""CSI errors: the gRPC status each failure answers with, and the one place that maps the
plane's API errors (plumbing.restclient.ApiError) and the driver's own to them."""
import functools
import logging

import grpc

from plumbing.errors import Invalid
from plumbing.restclient import ApiError
from services.csi.volumes import OutOfRange

log = logging.getLogger("strata.csi")


class CsiError(Exception):
    """Answer the call with ``code`` and ``message``."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code


def from_api(exc: ApiError) -> CsiError:
    """The gRPC status for what the plane answered: no answer is UNAVAILABLE (the sidecars
    retry), a bad token UNAUTHENTICATED, a role that may not PERMISSION_DENIED, a full pool
    RESOURCE_EXHAUSTED, a conflict with the plane's state FAILED_PRECONDITION."""
    status = exc.status
    if status is None or status in (502, 503, 504):
        code = grpc.StatusCode.UNAVAILABLE
    elif status == 401:
        code = grpc.StatusCode.UNAUTHENTICATED
    elif status == 403:
        code = grpc.StatusCode.PERMISSION_DENIED
    elif status == 404:
        code = grpc.StatusCode.NOT_FOUND
    elif status == 409:
        code = (grpc.StatusCode.ALREADY_EXISTS if exc.code == "exists"
                else grpc.StatusCode.FAILED_PRECONDITION)
    elif status == 507:
        code = grpc.StatusCode.RESOURCE_EXHAUSTED
    elif status == 400:
        code = grpc.StatusCode.INVALID_ARGUMENT
    else:
        code = grpc.StatusCode.INTERNAL
    return CsiError(code, f"Strata plane: {exc}")


def rpc(method):
    """Wrap a servicer method: its CsiError, Invalid and ApiError end the call with their
    status; anything else is INTERNAL with the error logged."""
    @functools.wraps(method)
    def call(self, request, context):
        try:
            return method(self, request, context)
        except CsiError as exc:
            error = exc
        except OutOfRange as exc:
            error = CsiError(grpc.StatusCode.OUT_OF_RANGE, str(exc))
        except Invalid as exc:
            error = CsiError(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except ApiError as exc:
            error = from_api(exc)
        except Exception as exc:  # a bug: the CO sees INTERNAL, the log has the trace
            log.exception("%s failed", method.__name__)
            error = CsiError(grpc.StatusCode.INTERNAL, f"{exc.__class__.__name__}: {exc}")
        log.info("%s: %s %s", method.__name__, error.code.name, error)
        context.abort(error.code, str(error))
    return call


def require(value, what: str):
    """``value``, or INVALID_ARGUMENT naming the missing field."""
    if not value:
        raise CsiError(grpc.StatusCode.INVALID_ARGUMENT, f"{what} is required")
    return value
