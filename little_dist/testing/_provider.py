"""The litellm side of the scripted model: the ``CustomLLM`` handler and its registration.

litellm keeps custom providers in the process-wide list ``litellm.custom_provider_map``, so
the scripted provider is process-wide too: one handler, registered once. Scripts are kept on
a stack (nested ``installed()`` blocks restore the outer script), each serving every model
or only the model name it was installed for: a call for ``scripted/<name>`` is answered by
the most recently installed script that serves ``<name>``, so two example modules imported
into one process (or a worker with several ``--app`` modules) each answer their own model.
litellm is imported here only, and only when a script is installed.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import TYPE_CHECKING, Any

from little_dist.testing.replies import ERROR_KINDS, Reply, estimate_usage

if TYPE_CHECKING:
    from little_dist.testing.scripted import ScriptedModel, ScriptedRequest

__all__ = ["active", "import_litellm", "push", "remove", "served_names"]

_lock = threading.Lock()
# (model name or None for every model, script), most recent last.
_stack: list[tuple[str | None, ScriptedModel]] = []
_handler: Any = None


def import_litellm() -> Any:
    """Import litellm without letting it fetch its price map from the network."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    return litellm


def push(script: ScriptedModel, model: str | None = None) -> None:
    litellm = import_litellm()
    with _lock:
        _register(litellm)
        _stack.append((model, script))


def remove(script: ScriptedModel) -> None:
    with _lock:
        for position in range(len(_stack) - 1, -1, -1):
            if _stack[position][1] is script:
                del _stack[position]
                return


def active(model: str | None = None) -> ScriptedModel | None:
    """The script that answers ``scripted/<model>`` (``None``: the latest one for every
    model, else the latest one at all)."""
    with _lock:
        for name, script in reversed(_stack):
            if name is None or name == model:
                return script
        if model is None and _stack:
            return _stack[-1][1]
        return None


def served_names() -> list[str]:
    """The model names scripts are installed for (``*``: a script for every model)."""
    with _lock:
        return sorted({"*" if name is None else name for name, _ in _stack})


def _register(litellm: Any) -> None:
    # The handler stays registered once made: with no script installed it answers with a clear
    # error instead of litellm's generic "unknown provider".
    global _handler
    from little_dist.testing.scripted import PROVIDER

    if _handler is None:
        _handler = _make_handler(litellm)
    entries = list(litellm.custom_provider_map or [])
    if any(e.get("custom_handler") is _handler for e in entries):
        return
    entries = [e for e in entries if e.get("provider") != PROVIDER]
    entries.append({"provider": PROVIDER, "custom_handler": _handler})
    litellm.custom_provider_map = entries


def _begin(
    litellm: Any, model: str, messages: Any, optional_params: Any, litellm_params: Any
) -> tuple[ScriptedModel, ScriptedRequest, Reply, float]:
    script = active(model)
    if script is None:
        served = ", ".join(served_names()) or "none"
        raise litellm.BadRequestError(
            message=(
                f"no ScriptedModel is installed to answer 'scripted/{model}' "
                f"(installed for: {served})"
            ),
            model=f"scripted/{model}",
            llm_provider="scripted",
        )
    params = dict(optional_params or {})
    tools = params.pop("tools", None) or []
    metadata = (litellm_params or {}).get("metadata") or {}
    request = script.answer(
        model=model, messages=messages, tools=tools, metadata=metadata, params=params
    )
    if request.reply is None:
        raise litellm.BadRequestError(
            message=script.describe_unanswered(request),
            model=f"scripted/{model}",
            llm_provider="scripted",
        )
    reply = request.reply
    if script.quota is not None and reply.kind != "error":
        _charge(litellm, script, request, reply)
    delay = script.latency if reply.latency is None else reply.latency
    return script, request, reply, delay


def _usage(script: ScriptedModel, request: ScriptedRequest, reply: Reply) -> Any:
    return reply.usage or estimate_usage(
        request.messages,
        request.tools,
        reply,
        cached_share=script.cached_share,
        reasoning_share=script.reasoning_share,
    )


def _charge(litellm: Any, script: ScriptedModel, request: ScriptedRequest, reply: Reply) -> None:
    """The provider's own limit: a call over it is refused with a 429 and ``Retry-After``."""
    from little_dist.testing.provider_quota import QuotaRefused

    assert script.quota is not None
    usage = _usage(script, request, reply)
    try:
        script.quota.charge(usage.input + usage.output)
    except QuotaRefused as refused:
        import httpx

        headers = {"retry-after": f"{refused.retry_after:.3f}"}
        raise litellm.RateLimitError(
            message=f"scripted provider quota: {refused}",
            model=f"scripted/{request.model}",
            llm_provider="scripted",
            headers=headers,
            response=httpx.Response(429, headers=headers),
        ) from None


def _finish(litellm: Any, script: ScriptedModel, request: ScriptedRequest, reply: Reply) -> Any:
    if reply.kind == "error":
        if isinstance(reply.error, BaseException):
            raise reply.error
        assert isinstance(reply.error, str)
        error_type = getattr(litellm, ERROR_KINDS[reply.error])
        raise error_type(
            message=reply.error_message
            or f"scripted {reply.error} failure (call #{request.index})",
            model=f"scripted/{request.model}",
            llm_provider="scripted",
        )
    usage = _usage(script, request, reply)
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id or f"call_{request.index}_{position}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_text()},
            }
            for position, call in enumerate(reply.tool_calls)
        ]
    finish_reason = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
    return litellm.ModelResponse(
        id=f"chatcmpl-scripted-{request.index}",
        model=request.model,
        choices=[{"index": 0, "finish_reason": finish_reason, "message": message}],
        usage=usage.to_openai(),
    )


def _timeout_of(value: Any) -> float | None:
    """The request's ``timeout`` in seconds, as a real provider's HTTP client reads it."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    seconds = getattr(value, "read", None)  # an httpx.Timeout
    return float(seconds) if isinstance(seconds, int | float) and seconds > 0 else None


def _timed_out(litellm: Any, model: str, limit: float) -> Exception:
    """What a real provider raises when its request outlives ``timeout``."""
    error: Exception = litellm.Timeout(
        message=f"scripted reply took longer than the request timeout of {limit:g}s",
        model=f"scripted/{model}",
        llm_provider="scripted",
    )
    return error


def _make_handler(litellm: Any) -> Any:
    class ScriptedLLM(litellm.CustomLLM):  # type: ignore[misc]
        """Serves ``scripted/<name>`` from the active :class:`ScriptedModel`."""

        def completion(
            self,
            model: str,
            messages: list[Any],
            *args: Any,
            optional_params: dict[str, Any] | None = None,
            litellm_params: dict[str, Any] | None = None,
            **kwargs: Any,
        ) -> Any:
            script, request, reply, delay = _begin(
                litellm, model, messages, optional_params, litellm_params
            )
            limit = _timeout_of(kwargs.get("timeout"))
            if delay and limit is not None and delay > limit:
                time.sleep(limit)
                raise _timed_out(litellm, model, limit)
            if delay:
                time.sleep(delay)
            return _finish(litellm, script, request, reply)

        async def acompletion(
            self,
            model: str,
            messages: list[Any],
            *args: Any,
            optional_params: dict[str, Any] | None = None,
            litellm_params: dict[str, Any] | None = None,
            **kwargs: Any,
        ) -> Any:
            script, request, reply, delay = _begin(
                litellm, model, messages, optional_params, litellm_params
            )
            limit = _timeout_of(kwargs.get("timeout"))
            if delay and limit is not None and delay > limit:
                await asyncio.sleep(limit)
                raise _timed_out(litellm, model, limit)
            if delay:
                await asyncio.sleep(delay)
            return _finish(litellm, script, request, reply)

    return ScriptedLLM()
