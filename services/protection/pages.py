"""Console pages of the protection service: schedules, replication (with lag), backups,
bucket snapshots and bucket replication."""
import logging
from types import SimpleNamespace

from plane.pages import Action, Column, FormField, Page
from services.object.public import Bucket
from services.protection import bucket_snapshots as snaps
from services.protection.models import (
    Backup,
    BackupTarget,
    BucketReplication,
    Replica,
    Replication,
    ReplicationPeer,
    RestorePoint,
    SnapshotSchedule,
)
from services.storage.models import FileSystem, Pool, Volume

log = logging.getLogger(__name__)


def filesystems() -> list[str]:
    return list(FileSystem.objects.values_list("name", flat=True))


def volumes() -> list[str]:
    return list(Volume.objects.values_list("name", flat=True))


def peers() -> list[str]:
    return list(ReplicationPeer.objects.values_list("name", flat=True))


def targets() -> list[str]:
    return list(BackupTarget.objects.values_list("name", flat=True))


def pools() -> list[str]:
    return list(Pool.objects.values_list("name", flat=True))


def buckets() -> list[str]:
    return list(Bucket.objects.values_list("name", flat=True))


def bucket_snapshots() -> list:
    """The gateway's bucket snapshots as rows (none while the gateway does not answer)."""
    try:
        return [SimpleNamespace(**s) for s in reversed(snaps.list_snapshots())]
    except Exception as exc:  # the page still renders; the API says what is wrong
        log.info("bucket snapshots not listed: %s", exc)
        return []


def replications() -> list:
    """Replications with the step of a failback under way (None when there is none)."""
    rows = list(Replication.objects.select_related("filesystem", "volume", "peer"))
    for rep in rows:
        rep.failback_phase = (rep.failback or {}).get("phase")
    return rows


FAILBACK_CONFIRM = (
    "Fail back {name}: the writes made on the peer's promoted copy since the failover are "
    "brought back here and this side's source is rolled back onto them in place. What was "
    "written here after the common snapshot is not lost: it is kept in a snapshot "
    "failback-{name}-<time> (clone it to get it back). Stop the writers on the peer's "
    "promoted copy first: writes made there after the pull are not brought back.")
ABANDON_CONFIRM = (
    "Abandon the failback of {name}: forget a failback that cannot complete (the peer's "
    "promoted copy is gone, ...) so that syncs are allowed again. What it already did "
    "stays, including the snapshot that keeps this side's writes.")

SOURCE = [FormField("filesystem", "File system", "select", choices=filesystems),
          FormField("volume", "Volume", "select", choices=volumes)]
GROUP = "Protection"

PAGES = [
    Page(slug="snapshot-schedules", title="Snapshot schedules", group=GROUP,
         api="/api/v1/snapshot-schedules/",
         queryset=lambda: SnapshotSchedule.objects.select_related("filesystem", "volume"),
         columns=[Column("name", "Name"), Column("source_label", "Source"),
                  Column("cron", "Cron (UTC)"), Column("every_minutes", "Every (min)"),
                  Column("keep_last", "Keep last"), Column("keep_daily", "Keep daily"),
                  Column("last_snapshot", "Last snapshot"), Column("last_error", "Error")],
         form=[FormField("name", "Name", required=True), *SOURCE,
               FormField("bucket", "Or bucket", "select", choices=buckets,
                         help="Bucket snapshots need versioning Enabled on the bucket."),
               FormField("cron", "Cron", help='Five fields in UTC, e.g. "0 * * * *".'),
               FormField("every_minutes", "Or every N minutes", "number"),
               FormField("keep_last", "Keep last", "number", default="24"),
               FormField("keep_hourly", "Keep hourly", "number"),
               FormField("keep_daily", "Keep daily", "number"),
               FormField("keep_weekly", "Keep weekly", "number")],
         actions=[Action("Run now", "/api/v1/snapshot-schedules/{key}/run/", watch_job=True)]),
    Page(slug="replication-peers", title="Replication peers", group=GROUP,
         api="/api/v1/replication-peers/", queryset=lambda: ReplicationPeer.objects.all(),
         columns=[Column("name", "Name"), Column("url", "URL"), Column("state", "State", "state"),
                  Column("remote_user", "Remote user"), Column("error", "Error")],
         form=[FormField("name", "Name", required=True),
               FormField("url", "URL of the other appliance", required=True),
               FormField("token", "Its API token", "password", required=True)],
         actions=[Action("Check", "/api/v1/replication-peers/{key}/check/")]),
    Page(slug="replications", title="Replication", group=GROUP, api="/api/v1/replications/",
         queryset=replications,
         columns=[Column("name", "Name"), Column("source.name", "Source"),
                  Column("peer.name", "Peer"), Column("target_name", "Replica"),
                  Column("state", "State", "state"), Column("lag_seconds", "Lag (s)"),
                  Column("last_snapshot", "Last snapshot"),
                  Column("failback_phase", "Failback step"), Column("error", "Error")],
         form=[FormField("name", "Name", required=True), *SOURCE,
               FormField("peer", "Peer", "select", choices=peers, required=True),
               FormField("target_pool", "Pool on the peer", required=True, default="default"),
               FormField("target_name", "Name on the peer"),
               FormField("every_minutes", "Every N minutes", "number", default="15")],
         actions=[Action("Sync now", "/api/v1/replications/{key}/sync/", watch_job=True),
                  # After a failover on the peer (see failback.py): a job; 409 says why not.
                  Action("Fail back", "/api/v1/replications/{key}/failback/", watch_job=True,
                         confirm=FAILBACK_CONFIRM),
                  Action("Abandon failback", "/api/v1/replications/{key}/failback/",
                         body={"abandon": True}, confirm=ABANDON_CONFIRM)]),
    Page(slug="replicas", title="Replicas received", group=GROUP, api="/api/v1/replicas/",
         queryset=lambda: Replica.objects.all(), deletable=False,
         columns=[Column("name", "Name"), Column("kind", "Kind"), Column("pool", "Pool"),
                  Column("last_snapshot", "Last snapshot"),
                  Column("last_received_at", "Received", "time"),
                  Column("promoted_to", "Promoted to")],
         actions=[Action("Promote", "/api/v1/replicas/{key}/promote/",
                         fields=[FormField("name", "New writable name", required=True)])]),
    Page(slug="backup-targets", title="Backup targets", group=GROUP,
         api="/api/v1/backup-targets/", queryset=lambda: BackupTarget.objects.all(),
         columns=[Column("name", "Name"), Column("endpoint_url", "S3 endpoint"),
                  Column("bucket", "Bucket"), Column("prefix", "Prefix")],
         form=[FormField("name", "Name", required=True),
               FormField("endpoint_url", "S3 endpoint URL", required=True),
               FormField("bucket", "Bucket", required=True), FormField("prefix", "Prefix"),
               FormField("access_key", "Access key", required=True),
               FormField("secret_key", "Secret key", "password", required=True)]),
    Page(slug="backups", title="Backups", group=GROUP, api="/api/v1/backups/",
         queryset=lambda: Backup.objects.select_related("target"),
         columns=[Column("name", "Name"), Column("source_name", "Source"),
                  Column("target.name", "Target"), Column("state", "State", "state"),
                  Column("last_run_at", "Last run", "time"), Column("error", "Error")],
         form=[FormField("name", "Name", required=True), *SOURCE,
               FormField("target", "Target", "select", choices=targets, required=True),
               FormField("every_minutes", "Every N minutes", "number")],
         actions=[Action("Back up now", "/api/v1/backups/{key}/run/", watch_job=True)]),
    Page(slug="restore-points", title="Restore points", group=GROUP,
         api="/api/v1/restore-points/", lookup="id",
         queryset=lambda: RestorePoint.objects.select_related("backup").order_by("-id")[:200],
         columns=[Column("id", "ID"), Column("backup.name", "Backup"),
                  Column("snapshot", "Snapshot"), Column("full", "Full"),
                  Column("stream_bytes", "Data", "bytes"),
                  Column("stored_bytes", "Stored", "bytes"), Column("created_at", "Taken", "time")],
         actions=[Action("Restore", "/api/v1/restore-points/{key}/restore/", watch_job=True,
                         fields=[FormField("name", "New name", required=True),
                                 FormField("pool", "Pool", "select", choices=pools)])]),
    Page(slug="bucket-snapshots", title="Bucket snapshots", group=GROUP,
         api="/api/v1/bucket-snapshots/", lookup="id", queryset=bucket_snapshots,
         columns=[Column("bucket", "Bucket"), Column("name", "Snapshot"),
                  Column("objects", "Objects"), Column("bytes", "Data", "bytes"),
                  Column("created_at", "Taken")],
         form=[FormField("bucket", "Bucket", "select", choices=buckets, required=True),
               FormField("name", "Name (default: manual-<time>)")],
         actions=[Action("Restore", "/api/v1/bucket-snapshots/{key}/restore/", watch_job=True,
                         fields=[FormField("bucket", "New bucket", required=True)])]),
    Page(slug="bucket-replications", title="Bucket replication", group=GROUP,
         api="/api/v1/bucket-replications/",
         queryset=lambda: BucketReplication.objects.select_related("target"),
         columns=[Column("name", "Name"), Column("bucket", "Bucket"),
                  Column("target.name", "Target"), Column("state", "State", "state"),
                  Column("lag_seconds", "Lag (s)"), Column("last_versions", "Versions"),
                  Column("last_deletes", "Deletes"), Column("error", "Error")],
         form=[FormField("name", "Name", required=True),
               FormField("bucket", "Bucket", "select", choices=buckets, required=True),
               FormField("target", "Target (S3 endpoint and bucket)", "select", choices=targets,
                         required=True),
               FormField("every_minutes", "Every N minutes", "number", default="15")],
         actions=[Action("Sync now", "/api/v1/bucket-replications/{key}/sync/",
                         watch_job=True)]),
]
