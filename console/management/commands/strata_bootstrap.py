from django.conf import settings
from django.core.management.base import BaseCommand

from console import bootstrap


class Command(BaseCommand):
    help = ("Create roles, the admin user and credentials.json; run each service's bootstrap "
            "(storage: the default pool, pools mounted again).")
    # `strata up` runs it after its `migrate`, which ran the system checks (importing every
    # URL and view of the plane for them again would cost a second or more)
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("--api-url", required=True)
        parser.add_argument("--console-url", required=True)
        parser.add_argument("--default-pool-size", default="10G")

    def handle(self, *args, **opts):
        settings.SERVICE_OPTIONS = {**(getattr(settings, "SERVICE_OPTIONS", None) or {}),
                                    "default_pool_size": opts["default_pool_size"]}
        creds = bootstrap.ensure_admin(opts["api_url"], opts["console_url"])
        services = bootstrap.run_service_bootstraps(creds)
        self.stdout.write(f"credentials: {bootstrap.credentials_path()}")
        if services:
            self.stdout.write(f"services: {', '.join(services)}")
