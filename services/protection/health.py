"""Alerts of the protection service for the console's dashboard."""
from services.protection.models import Backup, BucketReplication, Replication

# A replication is late when its lag passes this many intervals (or an hour without one).
LATE_INTERVALS = 3


def service_alerts() -> list[dict]:
    out = []
    for rep in [*Replication.objects.filter(enabled=True),
                *BucketReplication.objects.filter(enabled=True)]:
        what = "Bucket replication" if isinstance(rep, BucketReplication) else "Replication"
        lag = rep.lag_seconds()
        limit = LATE_INTERVALS * 60 * (rep.every_minutes or 20)
        if rep.state == "error":
            out.append({"level": "error", "text": f"{what} {rep.name} failed: {rep.error[:200]}"})
        elif lag is not None and lag > limit:
            out.append({"level": "warning",
                        "text": f"{what} {rep.name} lags {lag / 60:.0f} min (RPO target "
                                f"{limit / 60:.0f} min)"})
    for backup in Backup.objects.filter(state="error"):
        out.append({"level": "error", "text": f"Backup {backup.name} failed: {backup.error[:200]}"})
    return out
