"""Apply the shares: the file `strata up` reads at start, the kernel's cgroups (at once, so
a change is live), the background I/O budget and the S3 gateway's admission weights."""
from django.conf import settings

from plane import iobudget
from plumbing.workclass import CLASSES, ClassGroups, background_fraction, write_shares
from services.object.public import write_gateway_config
from services.qos.models import WorkClass


def groups() -> ClassGroups:
    return ClassGroups(settings.DATA_DIR)


def apply_shares() -> dict:
    """Make every class weigh what the database says; the shares applied. The cgroups are
    set only where `strata up` made them (it places the daemons in them)."""
    shares = WorkClass.shares()
    write_shares(settings.DATA_DIR, shares)
    if groups().base.is_dir():
        groups().apply(shares)
    iobudget.forget_cached()
    write_gateway_config()
    return shares


def rows() -> list[dict]:
    """Per class: its share, what the kernel has (group, cpu.shares, PIDs) and, for
    background, the fraction of its I/O budget it keeps while foreground work is busy."""
    WorkClass.ensure()
    saved = {row.name: row for row in WorkClass.objects.all()}
    shares = {name: row.share for name, row in saved.items()}
    kernel = groups().status()
    return [{"name": name, "share": shares[name], "updated_at": saved[name].updated_at,
             **kernel[name],
             "io_budget_fraction": round(background_fraction(shares), 4)
             if name == "background" else None} for name in CLASSES]
