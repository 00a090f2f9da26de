from django.core.management.base import BaseCommand

from plane.celery import app as celery_app


class Command(BaseCommand):
    help = ("Put the tasks a killed Celery worker had taken but not finished back on their "
            "queues (run by `strata up` before it starts the worker again; with one worker per "
            "appliance, every task not acknowledged was that worker's).")

    def handle(self, *args, **opts):
        with celery_app.connection_for_write() as conn:
            channel = conn.default_channel
            tags = channel.client.hkeys(channel.unacked_key)
            for tag in tags:
                channel.qos.restore_by_tag(tag)
        if tags:
            self.stdout.write(f"worker: {len(tags)} unfinished task(s) queued again")
