"""One background thread that runs submitted steps in order, so that hashing and writing a piece overlap with
inflating and reading the next one (zlib, hashlib and os.write all release the GIL on large buffers).

The queue is bounded (``depth`` items, each at most one 1 MiB piece), so memory stays bounded too. Two are
enough to keep both threads busy; a deeper queue only holds more memory and churns more of it. A step that
raises stops the rest; the error is raised in the submitting thread at its next ``submit`` or ``drain``.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

_Step = tuple[Callable[..., Any], tuple[Any, ...]]


class Pipeline:
    def __init__(self, depth: int = 2) -> None:
        self._queue: queue.Queue[_Step | threading.Event | None] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="loopx-pipeline", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            if self._error is not None:
                continue  # keep draining so that the submitter never blocks on a full queue
            func, args = item
            try:
                func(*args)
            except BaseException as exc:  # handed to the submitting thread
                self._error = exc

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def submit(self, func: Callable[..., Any], *args: Any) -> None:
        self._raise()
        self._queue.put((func, args))

    def drain(self) -> None:
        """Wait until every submitted step has run; raise the first error of any."""
        done = threading.Event()
        self._queue.put(done)
        done.wait()
        self._raise()

    def close(self) -> None:
        """Stop the thread after the steps already queued (errors among them are dropped)."""
        self._queue.put(None)
        self._thread.join()
