from django.core.management.base import BaseCommand

from console import bootstrap


class Command(BaseCommand):
    help = "After `strata up` stopped its daemons: each service's shutdown (pools released)."
    # `strata up` runs it after its `migrate`, which ran the system checks (importing every
    # URL and view of the plane for them again would cost a second or more)
    requires_system_checks = []

    def handle(self, *args, **opts):
        bootstrap.run_service_shutdowns()
