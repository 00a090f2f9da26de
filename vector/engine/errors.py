"""Exceptions raised by the vector engine.

Every error a caller can cause is a subclass of :class:`VectorError`; the REST layer maps
them to HTTP statuses with :func:`http_status`. Messages are written for the end user.
"""


class VectorError(Exception):
    """Base class of every vector-engine error; ``status`` is the HTTP status it maps to."""

    status = 400


class InvalidInput(VectorError):
    """A request is malformed (wrong type, missing field, bad shape)."""


class DimensionMismatch(InvalidInput):
    """A vector's length differs from the collection's dimension."""


class InvalidValues(InvalidInput):
    """A vector holds NaN or infinite values, or a zero vector for the cosine metric."""


class InvalidId(InvalidInput):
    """A vector id is not a non-empty string or an integer, or repeats within a batch."""


class InvalidMetadata(InvalidInput):
    """Metadata is not a JSON object of JSON values."""


class UnknownMetric(InvalidInput):
    """The metric is not one of l2, ip, cosine."""


class UnknownIndexType(InvalidInput):
    """The index type is not one of flat, ivf_flat, ivf_pq, hnsw."""


class InvalidParams(InvalidInput):
    """Index or search parameters are unknown, of the wrong type or out of range."""


class InvalidK(InvalidInput):
    """k is not an integer in 1..MAX_K."""


class InvalidFilter(InvalidInput):
    """A metadata filter is malformed (unknown operator, wrong operand type)."""


class UnknownFilterField(InvalidFilter):
    """A filter names a field that no stored vector has."""


class InvalidName(InvalidInput):
    """A collection name is not usable as a directory name."""


class VectorNotFound(VectorError):
    """No vector with this id is stored."""

    status = 404


class CollectionNotFound(VectorError):
    """No collection of this name exists (or the directory holds none)."""

    status = 404


class CollectionExists(VectorError):
    """A collection of this name (or in this directory) already exists."""

    status = 409


class CollectionLocked(VectorError):
    """Another process has this collection open."""

    status = 409


class CollectionClosed(VectorError):
    """The collection was closed or dropped."""

    status = 409


class BuildInProgress(VectorError):
    """An index build (training or rebuild) is already running on this collection."""

    status = 409


class BuildCancelled(VectorError):
    """An index build was cancelled by its caller; the previous index stays in service."""

    status = 409


class InsufficientTrainingData(VectorError):
    """Too few vectors to train the requested IVF/PQ index."""

    status = 409


class MemoryBudgetExceeded(VectorError):
    """The collection would not fit in the memory budget."""

    status = 507


class CorruptCollection(VectorError):
    """A checkpoint or write-ahead log on disk is damaged beyond its torn tail."""

    status = 500


def http_status(exc):
    """Return the HTTP status code the REST layer should answer for ``exc``."""
    return getattr(exc, "status", 500)
