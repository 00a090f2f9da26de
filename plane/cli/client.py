"""A thin REST client for the CLI: the token comes from credentials.json or STRATA_TOKEN."""
import json
import os
from pathlib import Path

import requests


class CliError(Exception):
    """A one-line message for the user; the CLI prints it and exits 1."""


class Client:
    def __init__(self, url: str, token: str):
        self.url = url.rstrip("/") + "/"
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Token {token}"

    @classmethod
    def from_environment(cls, data_dir: str | None) -> "Client":
        url, token = os.environ.get("STRATA_URL"), os.environ.get("STRATA_TOKEN")
        creds_path = Path(data_dir or os.environ.get("STRATA_DATA_DIR", "var")) / "credentials.json"
        if (not url or not token) and creds_path.exists():
            creds = json.loads(creds_path.read_text())
            url, token = url or creds["api_url"], token or creds["token"]
        if not url or not token:
            raise CliError(f"no credentials: {creds_path} does not exist; run `strata up` or "
                           "set STRATA_URL and STRATA_TOKEN")
        return cls(url, token)

    def request(self, method: str, path: str, **kwargs):
        try:
            resp = self.session.request(method, self.url + path.lstrip("/"), timeout=60, **kwargs)
        except requests.ConnectionError:
            raise CliError(f"cannot reach Strata at {self.url}; is `strata up` running?")
        if resp.status_code == 204:
            return None
        try:
            body = resp.json()
        except ValueError:
            body = {"detail": resp.text.strip()[:200]}
        if resp.status_code >= 400:
            detail = body.get("detail") if isinstance(body, dict) else body
            raise CliError(f"{detail} ({resp.status_code})")
        return body

    def get(self, path, **params):
        return self.request("GET", path, params=params or None)

    def list(self, path, **params):
        body = self.get(path, **params)
        return body["results"] if isinstance(body, dict) and "results" in body else body

    def post(self, path, data=None):
        return self.request("POST", path, json=data or {})

    def patch(self, path, data):
        return self.request("PATCH", path, json=data)

    def delete(self, path):
        return self.request("DELETE", path)
