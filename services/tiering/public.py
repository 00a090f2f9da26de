"""What other services may use of tiering (they import nothing else of it): the signals a
tier move sends (see ``services.tiering.signals``). ``check_move``: a service whose clients
could not follow the object, or that uses it, refuses the move (``plumbing.errors.Conflict``);
``moved``: what serves the object follows it to its new pool."""
from services.tiering.signals import check_move, moved

__all__ = ["check_move", "moved"]
