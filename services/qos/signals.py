"""A share that changes is applied once its transaction commits (service.apply_shares)."""
from django.db import transaction
from django.db.models.signals import post_save
from django.dispatch import receiver

from services.qos.models import WorkClass
from services.qos.service import apply_shares


@receiver(post_save, sender=WorkClass)
def share_changed(sender, instance, **kwargs):
    transaction.on_commit(apply_shares)
