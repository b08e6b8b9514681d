"""A model call the attempt stops waiting for the moment it is told to stop.

litellm's ``completion`` blocks its thread until the provider answers, and Python cannot stop
a thread. So the call runs on a thread of its own (a daemon, with the caller's context
variables) while the attempt's thread waits for it, looking at the attempt's ``cancelled()``
every :data:`POLL` seconds: a run cancelled (``little cancel``, its deadline, its parent
ending, a ``CancelToken``), a lost lease or a step past its timeout ends the wait at once
with :class:`CallInterrupted`, and the call is abandoned: its answer, whenever it comes, is
dropped (the provider may still bill it; :func:`spent_estimate` is what the attempt records
as spent: the prompt's tokens, counted as the quota limiter counts them, no output).

An attempt that cannot be cancelled (nothing to watch) calls on its own thread as before.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

__all__ = ["POLL", "CallInterrupted", "call_interruptibly", "spent_estimate"]

#: How often the waiting attempt looks at ``cancelled()`` (seconds).
POLL: Final = 0.05


class CallInterrupted(Exception):
    """The attempt was told to stop while its model call was in flight."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"interrupted after {seconds:.3f}s")
        self.seconds = seconds


def call_interruptibly(
    call: Callable[..., Any],
    kwargs: Mapping[str, Any],
    cancelled: Callable[[], bool],
    *,
    watch: bool = True,
) -> Any:
    """``call(**kwargs)``, abandoned with :class:`CallInterrupted` once ``cancelled()``
    (``watch=False``: called on this thread, nothing watched)."""
    if not watch:
        return call(**kwargs)
    import time

    done = threading.Event()
    box: dict[str, Any] = {}
    context = contextvars.copy_context()

    def run() -> None:
        try:
            box["value"] = context.run(call, **kwargs)
        except BaseException as exc:  # handed to the waiting thread
            box["error"] = exc
        finally:
            done.set()

    started = time.monotonic()
    threading.Thread(target=run, name="little-model-call", daemon=True).start()
    while not done.wait(POLL):
        if cancelled():
            raise CallInterrupted(time.monotonic() - started)
    if "error" in box:
        raise box["error"]
    return box["value"]


def spent_estimate(
    litellm_model: str,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    settings: Mapping[str, Any],
) -> dict[str, int]:
    """What an interrupted call is recorded as having spent: the prompt's tokens (the
    provider read them), no output tokens (none came back)."""
    from little_dist.harness.quota_estimate import estimate_amounts

    try:
        amounts = estimate_amounts(
            litellm_model, messages, tools, settings, default_output_tokens=0
        )
        given = int(amounts.input_tokens)
    except Exception:  # a model litellm cannot count for: a rough count of the characters
        given = sum(len(str(message.get("content") or "")) for message in messages) // 4
    return {"inputTokens": max(given, 1), "outputTokens": 0}
