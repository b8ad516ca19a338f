"""Run one API call per item concurrently: how the launcher creates a job's Services and Jobs, and deletes
them and their pods in the cleanup.

Creating 256 replicas one request after another costs 512 round trips in a row; a small pool of threads
keeps :data:`MAX_CONCURRENT_REQUESTS` of them in flight (the ``kubernetes`` client is thread-safe; its
connection pool holds ``5 x cores`` connections by default, so a few more threads than that would only queue).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TypeVar

MAX_CONCURRENT_REQUESTS = 8
CONCURRENT_FROM = 8  # fewer items than this run one after the other (a few round trips: nothing to win)

_T = TypeVar("_T")
_R = TypeVar("_R")


def run_all(fn: Callable[[_T], _R], items: Iterable[_T], max_workers: int = MAX_CONCURRENT_REQUESTS) -> list[_R]:
    """``[fn(item) for item in items]``, up to ``max_workers`` calls at a time; results in the items' order.

    Every call runs to its end even when another fails (so no request is left half-sent); then the exception
    of the first failed item, in the items' order, is raised. With fewer than :data:`CONCURRENT_FROM` items
    (or ``max_workers=1``) the calls run one after the other in the caller's thread. An exception in the caller's thread while it waits (SIGTERM turned into an
    exception) cancels the calls not yet started and waits for those in flight before it propagates.

    Raises:
        whatever ``fn`` raised for the first failing item.
    """
    todo = list(items)
    if len(todo) < CONCURRENT_FROM or max_workers <= 1:
        return [fn(item) for item in todo]
    pool = ThreadPoolExecutor(max_workers=min(max_workers, len(todo)), thread_name_prefix="kube-request")
    try:
        futures = [pool.submit(fn, item) for item in todo]
        wait(futures)
    except BaseException:
        # Interrupted in the caller (the launcher's SIGTERM): start no more calls, let those in flight end, so
        # the cleanup that follows sees every object that was created.
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    errors = [f.exception() for f in futures]
    for error in errors:
        if error is not None:
            raise error
    return [f.result() for f in futures]
