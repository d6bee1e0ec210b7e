"""The worker thread of an environment that owns a game process (TwxEnv's JVM, AlfworldEnv's child).

Every call into the process runs on this one thread, in order, so the event loop never blocks on a
game and the process never sees two callers at once. After `close` every call raises.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class WorkerThread:
    def __init__(self, owner: str, thread_name: str):
        self._owner = owner  # the environment's class name, for the error after close
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name)
        self.closed = False

    def check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"this {self._owner} is closed")

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """fn(*args) on the worker thread, awaited."""
        self.check_open()
        return await asyncio.get_running_loop().run_in_executor(self._executor, functools.partial(fn, *args))

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """fn(*args) on the worker thread, the caller blocked until it returns (for synchronous methods)."""
        self.check_open()
        return self._executor.submit(fn, *args).result()

    async def close(self, stop: Callable[[], Any]) -> None:
        """stop() on the worker thread (it ends the game process), then the thread; a second close
        does nothing."""
        if self.closed:
            return
        await self.run(stop)
        self.closed = True
        self._executor.shutdown(wait=True)
