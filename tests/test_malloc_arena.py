"""The local backend keeps one glibc malloc arena, so memory that one thread's stage frees (a rollout,
an update in a worker thread) is reused by the next stage on another thread (pats.backends.local.memory).
Counted with malloc_info in a fresh process: threads that allocate get arenas of their own unless
one_malloc_arena ran first."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc arenas")

COUNT_ARENAS = """
import ctypes, os, sys, tempfile, threading
from pats.backends.local.memory import one_malloc_arena
if sys.argv[1] == "one":
    assert one_malloc_arena()
def work():
    kept = [bytearray(200_000) for _ in range(20)]  # malloc'd (too large for Python's own allocator)
barrier = threading.Barrier(4)
def start():
    barrier.wait()  # all four allocate at once, as the update, the environments and the loop may
    work()
threads = [threading.Thread(target=start) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
libc = ctypes.CDLL("libc.so.6")
libc.fopen.restype = ctypes.c_void_p
path = tempfile.mktemp()
f = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, ctypes.c_void_p(f))
libc.fclose(ctypes.c_void_p(f))
print(open(path).read().count("<heap nr="))
os.unlink(path)
"""


def arenas(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", COUNT_ARENAS, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout)


def test_threads_share_one_arena_once_limited():
    assert arenas("many") > 1, "threads allocating at once get arenas of their own by default"
    assert arenas("one") == 1
