"""Strata's vector engine: faiss collections with durable writes. No Django here.

See vector/engine/README.md for the API contract the REST layer builds on.
"""

import logging

# faiss's loader logs each instruction-set build it probes and fails to import (AVX512, AVX2)
# at INFO, which reads like errors; its real failures are logged at ERROR and still show.
logging.getLogger("faiss.loader").setLevel(logging.WARNING)

from . import errors  # noqa: E402
from .memory import MemoryBudget
from .collection import Collection
from .errors import (BuildCancelled, BuildInProgress, CollectionClosed, CollectionExists,
                     CollectionLocked, CollectionNotFound, CorruptCollection, DimensionMismatch,
                     InsufficientTrainingData, InvalidFilter, InvalidId, InvalidInput, InvalidK,
                     InvalidMetadata, InvalidName, InvalidParams, InvalidValues,
                     MemoryBudgetExceeded, UnknownFilterField, UnknownIndexType, UnknownMetric,
                     VectorError, VectorNotFound)
from .manager import CollectionManager
from .spec import INDEX_PARAMS, INDEX_TYPES, MAX_K, METRICS, CollectionSpec, estimate_memory

__all__ = [
    "Collection", "CollectionManager", "CollectionSpec", "MemoryBudget", "estimate_memory",
    "errors", "METRICS", "INDEX_TYPES", "INDEX_PARAMS", "MAX_K",
    "VectorError", "InvalidInput", "DimensionMismatch", "InvalidValues", "InvalidId",
    "InvalidMetadata", "UnknownMetric", "UnknownIndexType", "InvalidParams", "InvalidK",
    "InvalidFilter", "UnknownFilterField", "InvalidName", "VectorNotFound", "CollectionNotFound",
    "CollectionExists", "CollectionLocked", "CollectionClosed", "BuildInProgress",
    "BuildCancelled", "InsufficientTrainingData", "MemoryBudgetExceeded", "CorruptCollection",
]
