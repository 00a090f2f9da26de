"""Console pages of the checkpoint service: jobs, and a timeline per job."""
from plane.pages import Action, Column, FormField, Page
from services.checkpoints.models import CheckpointJob
from services.storage.models import FileSystem


def filesystem_names() -> list[str]:
    return list(FileSystem.objects.values_list("name", flat=True))


PAGES = [
    Page(slug="checkpoint-jobs", title="Checkpoint jobs", group="Checkpoints",
         api="/api/v1/checkpoint-jobs/", detail="/console/checkpoints/",
         queryset=lambda: CheckpointJob.objects.select_related("filesystem", "latest"),
         help="Training jobs whose checkpoints Strata verifies, keeps and tiers. "
              "Open a job for its timeline of versions.",
         columns=[Column("name", "Name"), Column("tenant", "Tenant"),
                  Column("filesystem.name", "File system"), Column("bucket", "Bucket"),
                  Column("latest.step", "Latest step"), Column("keep_last", "Keep last")],
         form=[FormField("name", "Name", required=True),
               FormField("filesystem", "File system", "select", choices=filesystem_names),
               FormField("bucket", "Bucket"),
               FormField("tenant", "Tenant"),
               FormField("keep_last", "Keep last N", "number", default="3"),
               FormField("keep_every", "Keep every K-th step", "number")],
         actions=[Action("Apply retention", "/api/v1/checkpoint-jobs/{key}/retention/",
                         watch_job=True),
                  Action("Scan now", "/api/v1/checkpoint-jobs/{key}/scan/")]),
]
