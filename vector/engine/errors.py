"""Exceptions raised by the vector engine.

Every error a caller can cause is a subclass of :class:`VectorError`, itself a domain error
of `plumbing.errors`: each also subclasses the domain class that says what kind of error it
is (`Invalid`, `NotFound`, `Conflict`), and the API's one handler (`plane/errors.py`) maps
that to a status, as for every other service. Its ``code`` is the class name in snake_case
(``dimension_mismatch``). Messages are written for the end user.
"""
import re

from plumbing import errors


class VectorError(errors.StrataError):
    """Base class of every vector-engine error."""

    code = "vector_error"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.code = re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()


class InvalidInput(VectorError, errors.Invalid):
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


class VectorNotFound(VectorError, errors.NotFound):
    """No vector with this id is stored."""


class CollectionNotFound(VectorError, errors.NotFound):
    """No collection of this name exists (or the directory holds none)."""


class CollectionExists(VectorError, errors.Conflict):
    """A collection of this name (or in this directory) already exists."""


class CollectionLocked(VectorError, errors.Conflict):
    """Another process has this collection open."""


class CollectionClosed(VectorError, errors.Conflict):
    """The collection was closed or dropped."""


class BuildInProgress(VectorError, errors.Conflict):
    """An index build (training or rebuild) is already running on this collection."""


class BuildCancelled(VectorError, errors.Conflict):
    """An index build was cancelled by its caller; the previous index stays in service."""


class InsufficientTrainingData(VectorError, errors.Conflict):
    """Too few vectors to train the requested IVF/PQ index."""


class MemoryBudgetExceeded(VectorError, errors.Conflict):
    """The collection would not fit in the memory budget (a conflict with the collections
    already open, not a full pool: 409, not 507)."""


class CorruptCollection(VectorError):
    """A checkpoint or write-ahead log on disk is damaged beyond its torn tail (no kind of
    its own: the API answers 500)."""

