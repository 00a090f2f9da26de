"""The console's own pages: jobs, audit log, users."""
from django.contrib.auth.models import User

from plane.models import AuditEvent, Job
from plane.pages import Action, Column, FormField, Page
from plane.roles import ROLES

PAGES = [
    Page(slug="jobs", title="Jobs", group="System", api="/api/v1/jobs/", lookup="id",
         queryset=lambda: Job.objects.all()[:200], deletable=False,
         columns=[Column("id", "ID"), Column("kind", "Kind"), Column("target_name", "Target"),
                  Column("state", "State", "state"), Column("progress", "Progress", "progress"),
                  Column("transfer_line", "Transferred"), Column("message", "Message"), Column("error", "Error"),
                  Column("created_at", "Created", "time")],
         actions=[Action("Cancel", "/api/v1/jobs/{key}/cancel/")]),
    Page(slug="audit", title="Audit log", group="System", api="/api/v1/audit/", lookup="id",
         queryset=lambda: AuditEvent.objects.all()[:200], deletable=False,
         columns=[Column("time", "When", "time"), Column("username", "Who"),
                  Column("action", "What"), Column("status_code", "Status"),
                  Column("result", "Result", "state")]),
    Page(slug="users", title="Users and roles", group="System", api="/api/v1/users/",
         lookup="username", queryset=lambda: User.objects.prefetch_related("groups").order_by("id"),
         columns=[Column("username", "User"), Column("groups", "Role", "list"),
                  Column("is_superuser", "Admin"), Column("last_login", "Last login", "time")],
         form=[FormField("username", "User name", required=True),
               FormField("password", "Password", "password", required=True),
               FormField("role", "Role", "select", choices=list(ROLES), default="viewer")]),
]
ADMIN_ONLY = {"users"}
