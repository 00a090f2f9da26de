"""What other services may use of the cluster's nodes."""
from services.nodes.placement import served_here  # noqa: F401

__all__ = ["served_here"]
