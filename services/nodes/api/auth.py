"""A node authenticates with its own credential (``Authorization: Token <key>``), which
opens the node's own endpoints (heartbeat, self) and nothing else."""
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import BasePermission

from services.nodes import cluster


class NodePrincipal:
    """``request.user`` for a node: authenticated, no role, named after the node."""

    is_authenticated = True
    is_active = True
    is_superuser = False

    def __init__(self, node):
        self.node = node

    def get_username(self) -> str:
        return f"node:{self.node.name}"


class NodeCredentialAuthentication(TokenAuthentication):
    def authenticate_credentials(self, key):
        node = cluster.node_for(key)
        if node is None:
            raise AuthenticationFailed("This node credential is not valid (the node was "
                                       "removed, or never joined this plane).",
                                       code="node_credential_revoked")
        return NodePrincipal(node), node


class IsNode(BasePermission):
    def has_permission(self, request, view):
        return isinstance(request.user, NodePrincipal)


class NodeCredentialScheme(OpenApiAuthenticationExtension):
    """The schema's name for a node's credential (it is not a user's API token)."""

    target_class = "services.nodes.api.auth.NodeCredentialAuthentication"
    name = "nodeCredential"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "header", "name": "Authorization",
                "description": "`Token <the node's credential>` (from `strata node join`)"}
