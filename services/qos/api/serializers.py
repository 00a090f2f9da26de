from rest_framework import serializers

from plumbing.workclass import MAX_SHARE, MIN_SHARE
from services.qos.models import WorkClass


class WorkClassSerializer(serializers.ModelSerializer):
    """A class of work: its share (what it gets of a contended resource is its share over
    the sum of the contending classes' shares) and what the kernel has for it."""

    share = serializers.IntegerField(min_value=MIN_SHARE, max_value=MAX_SHARE, help_text=(
        f"{MIN_SHARE}..{MAX_SHARE}, as cgroup v2's cpu.weight/io.weight (100 is the default "
        "weight of an unclassed process)."))
    cgroup = serializers.CharField(read_only=True, allow_null=True,
                                   help_text="The class's cgroup (null: `strata up` made none).")
    cpu_shares = serializers.IntegerField(read_only=True, allow_null=True,
                                          help_text="Its cgroup v1 cpu.shares as the kernel has it.")
    pids = serializers.ListField(child=serializers.IntegerField(), read_only=True,
                                 help_text="The processes in the class's cgroup.")
    io_budget_fraction = serializers.FloatField(
        read_only=True, allow_null=True,
        help_text="background only: the fraction of its I/O budget it keeps while foreground "
                  "work is busy (its share over its own plus the larger foreground share).")

    class Meta:
        model = WorkClass
        fields = ["name", "share", "cgroup", "cpu_shares", "pids", "io_budget_fraction",
                  "updated_at"]
        read_only_fields = ["name", "updated_at"]
