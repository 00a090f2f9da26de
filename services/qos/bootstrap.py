"""The classes' rows (default shares on first start) and the shares applied: the file
`strata up` reads at its next start, the cgroups it made for this run."""
from services.qos.models import WorkClass
from services.qos.service import apply_shares


def bootstrap(creds: dict) -> dict:
    WorkClass.ensure()
    return {"work_classes": apply_shares()}
