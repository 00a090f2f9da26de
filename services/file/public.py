"""What other services may use of the file service (they import nothing else of it)."""
from services.file.entries import export_entries
from services.file.models import ApplyState, NfsExport, SmbShare

__all__ = ["ApplyState", "NfsExport", "SmbShare", "export_entries"]
