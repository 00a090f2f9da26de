"""The cluster's nodes as the plane sees them, the one-use join tokens that let a host
become one, and each node's own credential (revoked when the node is removed).

Tokens and credentials are kept as SHA-256 digests only, as :class:`plane.models.ApiToken`
is: the key is shown once (to the admin who made the join token, to the node that joined).
"""
from django.db import models

from services.storage.models import NameField


class Node(models.Model):
    """A host running the node agent (`strata node run`), or the host of `strata up`."""

    class State(models.TextChoices):
        JOINING = "joining"      # joined, no heartbeat yet
        UP = "up"                # heartbeats arrive
        DOWN = "down"            # heartbeats stopped (see services.nodes.cluster.DOWN_AFTER)

    class Schedule(models.TextChoices):
        ACTIVE = "active"        # takes new assignments
        CORDONED = "cordoned"    # keeps what it serves, takes nothing new
        DRAINED = "drained"      # what could move went to other nodes; serves nothing

    name = NameField(unique=True)
    management_address = models.CharField(max_length=255)
    data_address = models.CharField(max_length=255)
    # an IPv4 address with its prefix (10.77.0.101/24) that keepalived keeps on this node
    # while it lives and moves to a survivor when it dies ("" when none); unique
    floating_address = models.CharField(max_length=64, blank=True, default="")
    state = models.CharField(max_length=16, choices=State.choices, default=State.JOINING)
    schedule = models.CharField(max_length=16, choices=Schedule.choices,
                                default=Schedule.ACTIVE)
    # the services (daemon sets of `strata up`: block, file, object) the plane assigns to it
    services = models.JSONField(default=list, blank=True)
    # the options its daemons start with (ports, addresses), as `strata up`'s options
    options = models.JSONField(default=dict, blank=True)
    # what the agent reported: {daemon: {"state", "restarts", "pid", "last_exit"}}
    daemons = models.JSONField(default=dict, blank=True)
    version = models.CharField(max_length=64, blank=True, default="")
    local = models.BooleanField(default=False)   # the host of `strata up` (single host)
    # bumped on every node when what the services serve changes (services.nodes.placement):
    # the heartbeat's answer carries it, and a node whose revision moved reconciles again
    revision = models.PositiveBigIntegerField(default=0)
    db_role = models.CharField(max_length=63, blank=True, default="")  # its PostgreSQL role
    joined_at = models.DateTimeField(auto_now_add=True)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    # when the plane last fenced its CephFS clients (written down: services.file.grace); the
    # heartbeat's answer carries it, and an agent that sees it move restarts its file daemons
    fenced_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(
            fields=["floating_address"], condition=~models.Q(floating_address=""),
            name="nodes_node_floating_address_unique")]

    def __str__(self):
        return self.name


class JoinToken(models.Model):
    """A one-use, expiring token a host presents to join (``strata node token create``)."""

    digest = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8)
    created = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    used_by = models.CharField(max_length=63, blank=True, default="")

    class Meta:
        ordering = ["-id"]


class NodeCredential(models.Model):
    """The node's own API token: it authenticates the node's heartbeats and nothing else;
    deleted (revoked) when the node is removed."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="credential")
    digest = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8)
    created = models.DateTimeField(auto_now_add=True)
