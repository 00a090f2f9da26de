"""What other services may use of the file service (they import nothing else of it)."""
from services.file.models import ApplyState, NfsExport, SmbShare

__all__ = ["ApplyState", "NfsExport", "SmbShare"]
