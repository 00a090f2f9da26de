"""Roles: admin (everything), operator (provision), viewer (read).

A user's role is the name of its Django group; superusers are admins. The permission class
lets any authenticated user read, operators and admins change storage, and only admins
manage users.
"""
from rest_framework.permissions import SAFE_METHODS, BasePermission

ADMIN, OPERATOR, VIEWER = "admin", "operator", "viewer"
ROLES = (ADMIN, OPERATOR, VIEWER)


def role_of(user) -> str | None:
    if not user or not user.is_authenticated:
        return None
    if user.is_superuser:
        return ADMIN
    names = {g.name for g in user.groups.all()}
    for role in ROLES:
        if role in names:
            return role
    return VIEWER


def can_change(user) -> bool:
    return role_of(user) in (ADMIN, OPERATOR)


class RolePermission(BasePermission):
    """Read for every role; writes for operator and admin; views may ask for admin only."""

    message = "Your role does not allow this operation."

    def has_permission(self, request, view):
        role = role_of(request.user)
        if role is None:
            return False
        if getattr(view, "admin_only", False):
            return role == ADMIN
        if request.method in SAFE_METHODS:
            return True
        return role in (ADMIN, OPERATOR)
