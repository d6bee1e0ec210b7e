"""The local backend keeps one glibc malloc arena, so memory that one thread's stage frees (a rollout,
an update in a worker thread) is reused by the next stage on another thread (pats.backends.local.memory).
Counted with malloc_info in a fresh process: threads that allocate get arenas of their own unless
one_malloc_arena ran first. And it caps torch's and oneDNN's kernel caches, which otherwise keep
memory for every new matmul shape (malloc's in-use bytes, mallinfo2, in a fresh process)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from pats.backends.local.memory import KERNEL_CACHES
from pats.backends.local.policy import bf16_autocast_supported

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


KERNEL_CACHE_GROWTH = """
import ctypes, sys
import torch
from pats.backends.local.memory import small_kernel_caches
if sys.argv[1] == "small":
    small_kernel_caches()  # after torch's import, as LocalPolicy does: the caches are read lazily
torch.set_num_threads(1)
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                               "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
def in_use():
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd
weight = torch.randn(256, 64)
with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
    torch.nn.functional.linear(torch.randn(7, 64), weight)
    before = in_use()
    for rows in range(8, 408, 2):  # a new row count each time, as the update's packed passes have
        torch.nn.functional.linear(torch.randn(rows, 64), weight)
print(in_use() - before)
"""


def kernel_cache_growth(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if k not in KERNEL_CACHES}
    out = subprocess.run(
        [sys.executable, "-c", KERNEL_CACHE_GROWTH, mode], capture_output=True, text=True, check=True, env=env
    )
    return int(out.stdout)


@pytest.mark.skipif(not bf16_autocast_supported(torch.device("cpu")), reason="bf16 matmuls via oneDNN")
def test_kernel_caches_stop_growing_with_new_matmul_shapes():
    default, small = kernel_cache_growth("default"), kernel_cache_growth("small")
    assert default > 20 * 2**20, f"by default 200 shapes keep {default / 2**20:.1f} MiB in the caches"
    assert small < default / 4, f"capped: {small / 2**20:.1f} MiB, uncapped {default / 2**20:.1f} MiB"
