"""Keep the local backend's resident memory near what its tensors need (glibc malloc, Linux).

Measured at one thread (docs/journal/2026-12-01-peak-memory.md): the quickstart's resident memory
reached 4.3 GiB, and in `bench/studies/learning.py` each condition started from the last one's, mostly for
two reasons of glibc's malloc, not of pats' tensors:
- arenas: each thread that allocates gets an arena of its own (up to 8 per core), and memory freed
  into an arena stays there for that arena's later use. Rollouts allocate on the event loop's
  thread, the update on whichever worker thread `asyncio.to_thread` picks that step, the likelihood
  gap on another, so resident memory grew towards the sum of their peaks. `one_malloc_arena`;
- fragmentation: a stage's many large temporary tensors leave free holes in the heap that glibc
  keeps mapped. `release_free_memory` (malloc_trim) hands them back at stage boundaries: after each
  rollout turn and after each backward pass of the update.
Nothing a run computes depends on either. Elsewhere than glibc both do nothing.

A third reason is torch's own: under bf16 autocast on a CPU, matmuls run through oneDNN, and both
torch's cache of oneDNN computations (ideep, `LRU_CACHE_CAPACITY`, 1024 by default) and oneDNN's
primitive cache (`ONEDNN_PRIMITIVE_CACHE_CAPACITY`, 1024) keep an entry for every matmul shape seen.
Packed passes have a new row count nearly every time, so they filled up by 6-8 MB a pass each through
the quickstart's update (0.5 GiB over its 34 passes: live tensors stayed flat, malloc's in-use bytes
grew). `small_kernel_caches` caps them; a pass's 30 layers share their shapes, so a few entries
serve it. The same kernels run either way.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys

M_ARENA_MAX = -8  # mallopt's parameter number (glibc malloc.h)
# Entries of torch's and oneDNN's caches of matmul kernels (measured: docs/journal/2026-12-01-peak-memory.md).
KERNEL_CACHES = {"LRU_CACHE_CAPACITY": "16", "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "32"}


@functools.cache
def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt, libc.malloc_trim  # noqa: B018  (glibc has both; musl has neither)
    except (OSError, AttributeError):
        return None
    return libc


def one_malloc_arena() -> bool:
    """Threads that have no arena yet share the main one from now on (mallopt(M_ARENA_MAX, 1), as
    MALLOC_ARENA_MAX=1 would at start); call it before worker threads allocate. False without glibc."""
    libc = _libc()
    return bool(libc and libc.mallopt(M_ARENA_MAX, 1))


def release_free_memory() -> None:
    """Give the free memory inside malloc's heaps back to the system (malloc_trim(0)): the holes a
    stage's temporary tensors left. A few milliseconds; the next stage's first touch of those pages
    costs a page fault each."""
    libc = _libc()
    if libc:
        libc.malloc_trim(0)


def small_kernel_caches() -> None:
    """Cap the kernel caches (KERNEL_CACHES) unless the environment sets them already. Both are read
    once, at the first oneDNN matmul: call it before that (when the policy is built)."""
    for name, capacity in KERNEL_CACHES.items():
        os.environ.setdefault(name, capacity)
