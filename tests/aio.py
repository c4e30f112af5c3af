"""Running a coroutine from a synchronous test, also when the thread already runs an event loop.

Playwright's synchronous API (the session's Chromium) keeps a loop running in the main thread for the rest of the
session, so ``asyncio.run`` there fails in any test that runs after a browser test: run it in a thread of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    with ThreadPoolExecutor(1, thread_name_prefix="aio") as pool:
        return pool.submit(asyncio.run, coro).result()
