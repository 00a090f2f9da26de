"""Console pages of the storage service."""
from plane.pages import Action, Column, FormField, Page
from services.storage.models import FileSystem, Pool, Snapshot, Volume



def pool_names() -> list[str]:
    return list(Pool.objects.values_list("name", flat=True))


PAGES = [
    Page(slug="pools", title="Pools", group="Storage", api="/api/v1/pools/",
         queryset=lambda: Pool.objects.all(),
         help="A pool groups devices of one media class with a redundancy profile.",
         columns=[Column("name", "Name"), Column("driver", "Driver"),
                  Column("redundancy", "Redundancy"), Column("media", "Media"),
                  Column("state", "Health", "state"), Column("used_bytes", "Used", "bytes"),
                  Column("size_bytes", "Size", "bytes"), Column("error", "Error")],
         form=[FormField("name", "Name", required=True),
               FormField("devices", "Devices", "lines",
                         help="Block device paths or image:SIZE (a sparse image file)."),
               FormField("redundancy", "Redundancy", "select",
                         choices=["none", "mirror", "mirror3", "raid10"], default="none"),
               FormField("media", "Media", "select", choices=["flash", "capacity"],
                         default="flash"),
               FormField("driver", "Driver", "select", choices=["local", "directory", "spdk"])],
         actions=[Action("Scrub", "/api/v1/pools/{key}/scrub/", watch_job=True)]),
    Page(slug="filesystems", title="File systems", group="Storage", api="/api/v1/filesystems/",
         queryset=lambda: FileSystem.objects.select_related("pool"),
         columns=[Column("name", "Name"), Column("pool.name", "Pool"),
                  Column("used_bytes", "Used", "bytes"), Column("quota_bytes", "Quota", "bytes"),
                  Column("state", "State", "state"), Column("path", "Path"),
                  Column("kept_by", "Kept by service")],
         form=[FormField("name", "Name", required=True),
               FormField("pool", "Pool", "select",
                         choices=pool_names, help="Default: the pool named default."),
               FormField("quota_bytes", "Quota", "bytes")],
         actions=[Action("Set quota", "/api/v1/filesystems/{key}/", method="PATCH",
                         fields=[FormField("quota_bytes", "Quota", "bytes", required=True)]),
                  Action("Snapshot", "/api/v1/snapshots/", body={"filesystem": "{key}"},
                         fields=[FormField("name", "Snapshot name", required=True)])]),
    Page(slug="volumes", title="Volumes", group="Storage", api="/api/v1/volumes/",
         queryset=lambda: Volume.objects.select_related("pool"),
         columns=[Column("name", "Name"), Column("pool.name", "Pool"),
                  Column("size_bytes", "Size", "bytes"), Column("used_bytes", "Used", "bytes"),
                  Column("state", "State", "state"), Column("path", "Path")],
         form=[FormField("name", "Name", required=True),
               FormField("size_bytes", "Size", "bytes", required=True),
               FormField("pool", "Pool", "select", choices=pool_names)],
         actions=[Action("Resize", "/api/v1/volumes/{key}/resize/",
                         fields=[FormField("size_bytes", "New size", "bytes", required=True)]),
                  Action("Snapshot", "/api/v1/snapshots/", body={"volume": "{key}"},
                         fields=[FormField("name", "Snapshot name", required=True)])]),
    Page(slug="snapshots", title="Snapshots", group="Storage", api="/api/v1/snapshots/",
         lookup="id", queryset=lambda: Snapshot.objects.select_related("filesystem", "volume"),
         columns=[Column("name", "Name"), Column("filesystem.name", "File system"),
                  Column("volume.name", "Volume"), Column("state", "State", "state"),
                  Column("created_at", "Taken", "time"), Column("path", "Path")],
         form=[FormField("name", "Name", required=True),
               FormField("filesystem", "File system"), FormField("volume", "Volume")],
         actions=[Action("Clone", "/api/v1/snapshots/{key}/clone/",
                         fields=[FormField("name", "Clone name", required=True)])]),
]
