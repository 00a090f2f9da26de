"""The driver's view of the plane: which appliance, with whose token. The token comes from
the call's CSI secrets (key ``token``, as a StorageClass's
``csi.storage.k8s.io/provisioner-secret-*`` names them) or else from the plugin's own
configuration (``--token-file``, or ``STRATA_TOKEN``)."""
from dataclasses import dataclass

import grpc

from plumbing.restclient import ApiError, RestClient
from services.csi.errors import CsiError

SECRET_TOKEN = "token"


@dataclass
class PlaneConfig:
    url: str
    token: str | None = None
    ca_bundle: str | None = None
    timeout: float = 30.0

    def client(self, secrets=None) -> RestClient:
        """A REST client with the secrets' token, else the configured one."""
        token = (secrets or {}).get(SECRET_TOKEN) or self.token
        if not token:
            raise CsiError(grpc.StatusCode.UNAUTHENTICATED,
                           f"no Strata API token: give the secret {SECRET_TOKEN!r} or start "
                           "the plugin with --token-file")
        return RestClient(self.url, token, timeout=self.timeout, verify=self.ca_bundle)

    def reachable(self) -> bool:
        """True when the plane answers its health endpoint (no token needed)."""
        client = RestClient(self.url, "", timeout=5, verify=self.ca_bundle)
        try:
            client.request("GET", "health", ok=(200, 503))
            return True
        except ApiError:
            return False


def get_or_none(client: RestClient, path: str):
    """The object at ``path``, or None when the plane says 404."""
    try:
        return client.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def list_all(client: RestClient, path: str, **params) -> list:
    """Every row of a paginated list endpoint."""
    rows, offset = [], 0
    while True:
        body = client.get(path, limit=1000, offset=offset, **params)
        if not isinstance(body, dict):
            return rows + list(body or [])
        page = body.get("results", [])
        rows += page
        if not body.get("next") or not page:
            return rows
        offset += len(page)
