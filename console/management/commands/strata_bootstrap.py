from django.core.management.base import BaseCommand

from console import bootstrap


class Command(BaseCommand):
    help = "Create roles, the admin user, credentials.json and the default pool; mount pools."

    def add_arguments(self, parser):
        parser.add_argument("--api-url", required=True)
        parser.add_argument("--console-url", required=True)
        parser.add_argument("--default-pool-size", default="10G")

    def handle(self, *args, **opts):
        creds = bootstrap.ensure_admin(opts["api_url"], opts["console_url"])
        pool = bootstrap.ensure_default_pool(opts["default_pool_size"])
        states = bootstrap.bring_pools_online()
        services = bootstrap.run_service_bootstraps(creds)
        self.stdout.write(f"credentials: {bootstrap.credentials_path()}")
        if services:
            self.stdout.write(f"services: {', '.join(services)}")
        self.stdout.write(f"default pool: {pool}")
        for name, state in states.items():
            self.stdout.write(f"pool {name}: {state}")
