"""A thread pool whose threads never keep the process alive.

The in-process runner runs step attempts on it. ``concurrent.futures.ThreadPoolExecutor``
joins its threads when the interpreter exits, so one attempt stuck in a call that never
returns (the step timeout fails the attempt, but cannot stop the call) would keep ``little
run`` from ever exiting. These threads are daemons: an abandoned call dies with the process.
:meth:`DaemonThreadPool.abandon` also gives the pool a thread more, so a stuck thread does
not shrink it for the attempts still to come.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["DaemonThreadPool"]

T = TypeVar("T")

_Work = tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]


class DaemonThreadPool:
    """Up to ``max_workers`` daemon threads (started as needed, reused) running submitted
    calls; each call's :class:`~concurrent.futures.Future` holds its result."""

    def __init__(self, max_workers: int, *, name: str = "little-pool") -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers!r}")
        self._max = max_workers
        self._name = name
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._closed = False

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the pool is shut down")
            self._work.put((future, fn, args))
            if self._idle > 0:
                self._idle -= 1  # that thread takes it
            elif len(self._threads) < self._max:
                thread = threading.Thread(
                    target=self._serve,
                    name=f"{self._name}-{len(self._threads)}",
                    daemon=True,
                )
                self._threads.append(thread)
                thread.start()
        return future

    def abandon(self, future: Future[Any]) -> None:
        """``future``'s call is stuck and nobody waits for it any more: let the pool start
        one thread more in its place."""
        with self._lock:
            if not future.done():
                self._max += 1

    def shutdown(self, *, wait: bool = True) -> None:
        """Start no more calls (the queued ones are cancelled); ``wait``: until the running
        ones return."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        while True:
            try:
                item = self._work.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].cancel()
        for _ in threads:
            self._work.put(None)
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()

    def _serve(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            future, fn, args = item
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args)
                except BaseException as error:
                    future.set_exception(error)
                else:
                    future.set_result(result)
                del item, future, fn, args  # keep nothing of a finished call alive
            with self._lock:
                self._idle += 1
