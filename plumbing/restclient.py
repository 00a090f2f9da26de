"""The one client of Strata's REST API: the CLI, the checkpoint and vector SDKs and the
replication peer client all use it. Token auth, JSON bodies, errors as :class:`ApiError`
(status, code and detail from the API's ``{"error", "detail"}`` body), and :meth:`wait_job`,
which polls a Job until it finishes."""
import json
import os
import time
from pathlib import Path

import requests

FINISHED = ("succeeded", "failed", "cancelled")


class ApiError(Exception):
    """The API refused a request, or could not be reached (``status`` None): one line for a
    user in ``str(error)``; ``code`` and ``detail`` from the body."""

    def __init__(self, message: str, status: int | None = None, body=None):
        super().__init__(message)
        self.status = status
        self.body = body if isinstance(body, dict) else {"detail": str(body or message)}
        self.code = self.body.get("error", "error")
        self.detail = self.body.get("detail", message)


class JobFailed(ApiError):
    """A Job the caller waited for ended failed or cancelled; ``job`` is its last state."""

    def __init__(self, job: dict):
        super().__init__(f"job {job['id']} ({job.get('kind', '')}) {job['state']}: "
                         f"{job.get('error') or job.get('message') or ''}".rstrip(": "),
                         409, {"error": f"job_{job['state']}",
                               "detail": job.get("error") or job.get("message")})
        self.job = job


class RestClient:
    """Calls ``<url>/api/v1/<path>`` with ``Authorization: Token <token>``."""

    error = ApiError  # a client of one service can raise its own subclass

    def __init__(self, url: str, token: str, timeout: float = 60.0, session=None,
                 verify: str | None = None):
        self.verify = verify  # a CA bundle to trust (an appliance's own TLS certificate)
        self.root = url.rstrip("/").removesuffix("/api/v1")  # credentials.json has the API URL
        self.url = self.root + "/api/v1/"
        self.token, self.timeout = token, timeout
        self.session = session or requests.Session()
        self.session.headers["Authorization"] = f"Token {token}"

    @classmethod
    def from_environment(cls, data_dir: str | None = None, **kwargs) -> "RestClient":
        """From STRATA_URL and STRATA_TOKEN, else ``DATA_DIR/credentials.json`` (`strata up`
        writes it; default ./var), trusting its ``ca_bundle`` when the appliance serves TLS."""
        url, token = os.environ.get("STRATA_URL"), os.environ.get("STRATA_TOKEN")
        path = Path(data_dir or os.environ.get("STRATA_DATA_DIR", "var")) / "credentials.json"
        ca_bundle = None
        if (not url or not token) and path.exists():
            creds = json.loads(path.read_text())
            url, token = url or creds["api_url"], token or creds["token"]
            ca_bundle = creds.get("ca_bundle")  # `strata up --tls`: trust its certificate
        if not url or not token:
            raise ApiError(f"no credentials: {path} does not exist; run `strata up` or set "
                           "STRATA_URL and STRATA_TOKEN")
        if ca_bundle:
            kwargs.setdefault("verify", ca_bundle)
        return cls(url, token, **kwargs)

    def _url(self, path: str) -> str:
        return path if path.startswith("http") else self.url + path.lstrip("/")

    def request(self, method: str, path: str, ok=None, **kwargs):
        """The decoded JSON answer (None for an empty one). Raises ``self.error`` for a status
        outside ``ok`` (default: any below 400) and when the API cannot be reached."""
        kwargs.setdefault("timeout", self.timeout)
        if self.verify:  # per request: requests lets REQUESTS_CA_BUNDLE override the session's
            kwargs.setdefault("verify", self.verify)
        try:
            resp = self.session.request(method, self._url(path), **kwargs)
        except requests.RequestException as exc:
            raise self.error(f"cannot reach Strata at {self.url}; is `strata up` running? "
                             f"({exc.__class__.__name__})") from exc
        try:
            body = resp.json() if resp.content else None
        except ValueError:
            body = {"detail": resp.text.strip()[:300]}
        if resp.status_code not in ok if ok else resp.status_code >= 400:
            detail = body.get("detail", body) if isinstance(body, dict) else body
            raise self.error(f"{detail} ({resp.status_code})", resp.status_code, body)
        return body

    def get(self, path, **params):
        return self.request("GET", path, params=params or None)

    def list(self, path, **params):
        """A list endpoint's rows (the ``results`` of a paginated answer)."""
        body = self.get(path, **params)
        return body["results"] if isinstance(body, dict) and "results" in body else body

    def post(self, path, data=None):
        return self.request("POST", path, json=data or {})

    def patch(self, path, data):
        return self.request("PATCH", path, json=data)

    def delete(self, path):
        return self.request("DELETE", path)

    def wait_job(self, job, timeout: float = 3600.0, poll: float = 0.5, on_update=None,
                 raise_on_failure: bool = True, max_poll: float | None = None) -> dict:
        """Poll a Job (its id, URL, or an answer holding ``id``/``job``) until it finishes.
        ``on_update(job)`` sees every poll. Returns the final Job; raises :class:`JobFailed`
        when it failed or was cancelled (unless ``raise_on_failure`` is False) and
        TimeoutError after ``timeout`` seconds. Polls every ``poll`` seconds; with
        ``max_poll``, the wait doubles after each poll up to that (a short job is seen at
        once, a long one costs few requests)."""
        if isinstance(job, dict):
            job = job.get("job") or job.get("url") or job["id"]
        path = job if isinstance(job, str) and not job.isdigit() else f"jobs/{job}/"
        deadline = time.monotonic() + timeout
        while True:
            state = self.get(path)
            if on_update:
                on_update(state)
            if state["state"] in FINISHED:
                if raise_on_failure and state["state"] != "succeeded":
                    raise JobFailed(state)
                return state
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {state['id']} still {state['state']} after {timeout} s")
            time.sleep(poll)
            if max_poll is not None:
                poll = min(poll * 2, max_poll)
