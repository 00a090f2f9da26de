from django.core.management.base import BaseCommand, CommandError

from plane.discovery import service_modules


class Command(BaseCommand):
    help = ("Put back into a service's daemons what the database says they serve (run by "
            "`strata up` after it started a daemon again: a new tgtd has no targets).")
    # `strata up` runs it after its `migrate`, which ran the system checks (importing every
    # URL and view of the plane for them again would cost a second or more)
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("service", help="the service's app label (block, file, ...)")

    def handle(self, *args, **opts):
        for app, module in service_modules("bootstrap"):
            if app.label == opts["service"] and hasattr(module, "reconcile"):
                summary = module.reconcile()
                self.stdout.write(f"{app.label}: state re-applied: {summary}")
                return
        raise CommandError(f"no service {opts['service']!r} with a reconcile()")
