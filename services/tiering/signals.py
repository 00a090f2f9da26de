"""Signals tiering sends; the services that serve or use a moved object receive them
(tiering imports none of them; they import these through ``services.tiering.public``).

``moved``: sent by a tier move (``sender`` = ``FileSystem`` or ``Volume``) once the row points
at the copy in the new pool and before the old copy is released, with ``instance`` (the
row, already switched), ``old_path`` and ``old_pool``. A receiver makes what it serves follow
the object to ``instance.path`` (the file service: NFS exports and SMB shares keep their
pseudo path and share name) and lets go of ``old_path``; it raises when it cannot. The move
then puts the row back, sends ``moved`` again the other way (with ``undo=True``; a receiver
must not refuse that one), and keeps the old copy.

``check_move``: sent by ``moves.check_movable`` before a move is queued, and again when it
starts (``sender`` = the model, ``instance`` = the row, ``pool`` = the target Pool). A
service whose clients could not follow the object (block: NVMe-oF exports), or that uses
it (protection: a replication or backup), raises ``plumbing.errors.Conflict`` (409) naming
what holds it.
"""
from django.dispatch import Signal

moved = Signal()
check_move = Signal()
