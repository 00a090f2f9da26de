from django.core.management.base import BaseCommand

from console import bootstrap


class Command(BaseCommand):
    help = "After `strata up` stopped its daemons: each service's shutdown (pools released)."

    def handle(self, *args, **opts):
        bootstrap.run_service_shutdowns()
