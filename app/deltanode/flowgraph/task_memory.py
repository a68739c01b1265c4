"""Give a finished task's memory back to the OS.

Spark reuses Python workers across tasks, and each task of a flowgraph passes up to a
split's share of the batch byte cap through it (Kafka message bytes from malloc, Arrow
buffers from Arrow's pool). Both allocators keep freed memory for later by default, so
without this every worker that ever ran a task stays at its largest task's size, and the
sum over the workers grows with the number of batches rather than with the cap.
"""

from __future__ import annotations

import ctypes
import ctypes.util

import pyarrow as pa

_libc_name = ctypes.util.find_library("c")
_malloc_trim = getattr(ctypes.CDLL(_libc_name), "malloc_trim", None) if _libc_name else None


def release_task_memory() -> None:
    pa.default_memory_pool().release_unused()
    if _malloc_trim is not None:  # glibc only
        _malloc_trim(0)
