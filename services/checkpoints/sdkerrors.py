"""The checkpoint SDK's errors (no Django). They live apart from the SDK (sdk.py) so that its
DCP helpers (dcp.py), which the SDK imports only when they are used, raise them without
importing the SDK: imports go one way, sdk -> dcp -> sdkerrors."""
from plumbing.restclient import ApiError


class StrataError(ApiError):
    """The plane refused a request: `status`, `code` and `detail` say why (`body` is the
    API's JSON answer)."""

    def __init__(self, status: int, body: dict):
        body = body if isinstance(body, dict) else {"detail": str(body)}
        detail = body.get("detail", str(body))
        super().__init__(f"{status} {body.get('error', 'error')}: {detail}", status, body)
        self.detail = detail

    def __reduce__(self):  # rebuilt from what __init__ takes (a process-based save pickles it)
        return type(self), (self.status, self.body), self.__dict__


class IncompleteCheckpointError(StrataError):
    """A commit was refused: `shards` lists every missing, short or corrupt shard."""

    @property
    def shards(self) -> list:
        return self.body.get("shards", [])


def error_for(message: str, status: int | None = None, body=None) -> StrataError:
    """The SDK's error for a refused request (`RestClient.error`): IncompleteCheckpointError
    when a commit was refused for its shards, else StrataError."""
    body = body if isinstance(body, dict) else {} if body is None else {"detail": str(body)}
    if status is None:  # the plane was not reached
        body = {"error": "unreachable", "detail": message}
    cls = IncompleteCheckpointError if body.get("error") == "incomplete" else StrataError
    return cls(status, body)
