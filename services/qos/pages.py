"""Console page of the classes of work: each class's share, set in place."""
from plane.pages import Action, Column, FormField, Page
from services.qos.service import rows


class _Row(dict):
    __getattr__ = dict.get


PAGES = [
    Page(slug="work-classes", title="Classes of work", group="System",
         api="/api/v1/qos/classes/", queryset=lambda: [_Row(r) for r in rows()],
         deletable=False,
         help="What each class of work gets of a contended resource is its share over the sum "
              "of the contending classes' shares. samples: sample reads (NFS/SMB through "
              "Ganesha's and smbd's cgroup, S3 buckets tagged samples in the gateway's "
              "admission queue); checkpoints: saves and restores (buckets tagged checkpoints, "
              "the API); background: Celery's tier moves, replication, scrub (its cgroup and "
              "the I/O budget).",
         columns=[Column("name", "Class"), Column("share", "Share"),
                  Column("cpu_shares", "cpu.shares (kernel)"), Column("pids", "Processes", "list"),
                  Column("io_budget_fraction", "Background keeps (busy foreground)")],
         actions=[Action("Set share", "/api/v1/qos/classes/{key}/", method="PATCH",
                         fields=[FormField("share", "Share", "number", required=True,
                                           help="1..10000")])]),
]
