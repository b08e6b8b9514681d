"""A scripted LLM served through litellm, so tests run the same code path as a real provider.

Models are addressed as ``scripted/<name>``. While a :class:`ScriptedModel` is installed,
``litellm.completion(model="scripted/<name>", messages=..., tools=...)`` (and
``acompletion``) returns a real litellm ``ModelResponse`` — content or OpenAI-format
``tool_calls``, ``usage`` with ``prompt_tokens_details.cached_tokens`` and
``completion_tokens_details.reasoning_tokens`` — or raises litellm's own exception types::

    script = ScriptedModel()
    script.on(step="summarize").reply_json({"summary": "ok"}, usage=Usage(1200, 80, cached=1000))
    script.on(step="triage").call_tool("lookup", {"accountId": "A1"}).then_reply_text("done")
    script.on(match=lambda req: "repair" in req.last_user_text).reply_text("fixed")
    script.fail(step="flaky", times=2, error="rate_limit")
    with script.installed():
        litellm.completion(model="scripted/default", messages=[...],
                           metadata={"little": {"stepPath": "summarize", "runId": "run_1"}})

Routing. litellm hands the request's ``metadata=`` keyword to the provider unchanged (as
``litellm_params["metadata"]``); the harness sends ``metadata={"little": {"stepPath": ...,
"runId": ...}}`` and rules match on ``step`` (exact ``stepPath``), ``run`` (``runId``),
``model`` (the name after ``scripted/``), ``contains`` (substring of the last user message)
or ``match`` (any predicate over the :class:`ScriptedRequest`). All given filters must hold.
Rules are tried in the order they were added; each holds a queue of replies consumed in order
(a reply with ``times=None`` answers forever); an exhausted rule steps aside for the next
matching one, and ``otherwise()`` is tried last. A call nothing answers raises litellm's
``BadRequestError`` naming the call (and is kept in :attr:`ScriptedModel.unanswered`).

Several scripts. ``install(model="triage")`` serves only ``scripted/triage``: scripts for
different model names answer side by side (the examples install theirs this way); a script
installed without a name answers every model not taken by a more recent one.

Other processes. A worker process honours ``LITTLE_SCRIPTED_MODEL=/path/script.json`` at start
by calling :func:`install_from_env`; :func:`install_from_file` does the same for an explicit
path. Script files are written with :meth:`ScriptedModel.save` (format in
:mod:`little_dist.testing.script_file`). Each process consumes its own copy of the queues; a
shared JSON-lines call log (``call_log=``) records every call from every process.

Rules and their reply queues are in :mod:`little_dist.testing.rules`; a served call is a
:class:`~little_dist.testing.scripted_request.ScriptedRequest`.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from little_dist.errors import InvalidInputError
from little_dist.testing.provider_quota import ProviderQuota
from little_dist.testing.rules import Matcher, Rule
from little_dist.testing.scripted_request import METADATA_KEY, ScriptedRequest, message_dict

__all__ = [
    "METADATA_KEY",
    "PROVIDER",
    "SCRIPT_ENV_VAR",
    "Rule",
    "ScriptedModel",
    "ScriptedRequest",
    "active_script",
    "install_from_env",
    "install_from_file",
    "read_call_log",
]

PROVIDER = "scripted"
SCRIPT_ENV_VAR = "LITTLE_SCRIPTED_MODEL"
#: The largest script file :meth:`ScriptedModel.load` reads.
_MAX_SCRIPT_BYTES = 64 * 1024 * 1024


class ScriptedModel:
    """A script of replies plus a thread-safe log of every call it served.

    ``latency`` is the default delay per call (seconds; ``time.sleep`` in ``completion``,
    ``asyncio.sleep`` in ``acompletion``). Without an explicit ``usage``, token counts are
    estimated from text lengths; ``cached_share`` and ``reasoning_share`` set the cached and
    reasoning parts. ``call_log`` appends every call as a JSON line (shared across processes).
    ``quota``: the provider's requests and tokens per period; a call over it gets a 429 with
    ``Retry-After`` (and still uses up its scripted reply).
    """

    def __init__(
        self,
        *,
        latency: float = 0.0,
        cached_share: float = 0.0,
        reasoning_share: float = 0.0,
        call_log: str | Path | None = None,
        quota: ProviderQuota | None = None,
    ) -> None:
        for name, share in (("cached_share", cached_share), ("reasoning_share", reasoning_share)):
            if not 0.0 <= share <= 1.0:
                raise InvalidInputError(f"{name} must be between 0 and 1, got {share!r}")
        if latency < 0:
            raise InvalidInputError(f"latency must be >= 0 seconds, got {latency!r}")
        self.latency = latency
        self.cached_share = cached_share
        self.reasoning_share = reasoning_share
        self.call_log = None if call_log is None else Path(call_log)
        #: The provider's own rate limit (429s beyond it), shared by every process serving
        #: this script when it is Redis-backed (see :mod:`little_dist.testing.provider_quota`).
        self.quota = quota
        self._lock = threading.RLock()
        self._rules: list[Rule] = []
        self._otherwise = Rule(self._lock)
        self._calls: list[ScriptedRequest] = []

    # -- building ---------------------------------------------------------------------------

    def on(
        self,
        *,
        step: str | None = None,
        model: str | None = None,
        run: str | None = None,
        contains: str | None = None,
        match: Matcher | None = None,
    ) -> Rule:
        """A new rule for the calls matching every given filter."""
        rule = Rule(self._lock, step=step, model=model, run=run, contains=contains, match=match)
        with self._lock:
            self._rules.append(rule)
        return rule

    def fail(
        self,
        *,
        step: str | None = None,
        model: str | None = None,
        run: str | None = None,
        contains: str | None = None,
        match: Matcher | None = None,
        times: int | None = 1,
        error: str | BaseException = "rate_limit",
        message: str | None = None,
    ) -> Rule:
        """Shorthand: the matching calls fail ``times`` times, then later rules answer."""
        rule = self.on(step=step, model=model, run=run, contains=contains, match=match)
        return rule.raise_error(error, message=message, times=times)

    def otherwise(self) -> Rule:
        """The rule tried after every other one (matches every call)."""
        return self._otherwise

    @property
    def rules(self) -> list[Rule]:
        with self._lock:
            return list(self._rules)

    # -- what happened ----------------------------------------------------------------------

    @property
    def calls(self) -> list[ScriptedRequest]:
        """Every call served so far, in arrival order, each with the reply it got."""
        with self._lock:
            return list(self._calls)

    @property
    def unanswered(self) -> list[ScriptedRequest]:
        """Calls no rule answered (each raised ``BadRequestError``)."""
        return [call for call in self.calls if call.reply is None]

    def calls_for(
        self, *, step: str | None = None, model: str | None = None, run: str | None = None
    ) -> list[ScriptedRequest]:
        """The calls whose step path, model name and run id equal the given ones."""
        probe = Rule(self._lock, step=step, model=model, run=run)
        return [call for call in self.calls if probe.matches(call)]

    def pending(self) -> list[str]:
        """Descriptions of scripted replies never used (forever replies excluded)."""
        with self._lock:
            return [
                f"{rule.describe()} -> {reply.description}"
                for rule in [*self._rules, self._otherwise]
                for reply in rule.pending()
            ]

    def assert_all_used(self) -> None:
        """Raise ``AssertionError`` if a scripted reply was never used or a call went
        unanswered."""
        problems = [f"unused: {item}" for item in self.pending()]
        problems += [
            f"unanswered: call #{c.index} model={c.model!r} step={c.step_path!r}"
            for c in self.unanswered
        ]
        if problems:
            raise AssertionError("scripted model: " + "; ".join(problems))

    # -- serving (called by the litellm handler) --------------------------------------------

    def answer(
        self,
        *,
        model: str,
        messages: Sequence[Any],
        tools: Sequence[Mapping[str, Any]] | None = None,
        metadata: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> ScriptedRequest:
        """Record one call and pick its reply (``reply`` is ``None`` when nothing answers)."""
        normalized = [message_dict(message) for message in messages]
        tool_list = [message_dict(tool) for tool in tools or ()]
        meta = json.loads(json.dumps(dict(metadata or {}), default=str))
        extra = json.loads(json.dumps(dict(params or {}), default=str))
        with self._lock:
            request = ScriptedRequest(
                index=len(self._calls),
                model=model,
                messages=normalized,
                tools=tool_list,
                metadata=meta,
                params=extra,
            )
            reply = None
            for rule in [*self._rules, self._otherwise]:
                reply = rule.take(request)
                if reply is not None:
                    break
            request = replace(request, reply=reply)
            self._calls.append(request)
        if self.call_log is not None:
            _append_record(self.call_log, request.to_record())
        return request

    def describe_unanswered(self, request: ScriptedRequest) -> str:
        rules = ", ".join(rule.describe() for rule in self.rules) or "none"
        return (
            f"scripted model: no reply scripted for call #{request.index} "
            f"(model={request.model!r}, stepPath={request.step_path!r}, "
            f"runId={request.run_id!r}, last user text={request.last_user_text[:80]!r}); "
            f"rules: {rules}"
        )

    # -- installation -----------------------------------------------------------------------

    def install(self, model: str | None = None) -> None:
        """Serve ``scripted/*`` calls from this script, process-wide, until :meth:`uninstall`
        -- only ``scripted/<model>`` calls when ``model`` is given, so scripts installed for
        different model names answer side by side. Imports litellm (slow) and registers the
        provider on first use."""
        from little_dist.testing import _provider

        if model is not None and (not isinstance(model, str) or not model or "/" in model):
            raise InvalidInputError(
                f"install(model=...) takes the name after 'scripted/', got {model!r}"
            )
        _provider.push(self, model)

    def uninstall(self) -> None:
        """Stop serving; a script installed before this one (if any) serves again."""
        from little_dist.testing import _provider

        _provider.remove(self)

    @contextmanager
    def installed(self, model: str | None = None) -> Iterator[ScriptedModel]:
        """Install (for ``model`` only, when given) for the duration of a ``with`` block."""
        self.install(model)
        try:
            yield self
        finally:
            self.uninstall()

    # -- files ------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The script-file form (rules with ``match=`` predicates cannot be saved)."""
        from little_dist.testing.script_file import dump_script

        return dump_script(self)

    def save(self, path: str | Path) -> Path:
        """Write the script as JSON for another process (see :func:`install_from_file`)."""
        target = Path(path)
        target.write_text(json.dumps(self.to_dict(), indent=2), encoding="utf-8")
        return target

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScriptedModel:
        from little_dist.testing.script_file import load_script

        return load_script(data)

    @classmethod
    def load(cls, path: str | Path) -> ScriptedModel:
        """The script saved at ``path`` (a regular file, 64 MiB at most)."""
        from little_dist.bounded_read import ReadRefusedError, read_file

        source = Path(path)
        label = f"scripted model file {source}"
        try:
            data = json.loads(read_file(source, _MAX_SCRIPT_BYTES, label=label).decode("utf-8"))
        except ReadRefusedError:
            raise
        except (ValueError, RecursionError) as error:  # not UTF-8, not JSON
            raise InvalidInputError(f"cannot read {label}: {error}") from error
        return cls.from_dict(data)


def active_script(model: str | None = None) -> ScriptedModel | None:
    """The script currently serving ``scripted/<model>`` calls in this process (any
    ``scripted/*`` call when ``model`` is ``None``), if any."""
    from little_dist.testing import _provider

    return _provider.active(model)


def install_from_file(path: str | Path) -> ScriptedModel:
    """Load a script file and install it for the rest of the process's life."""
    script = ScriptedModel.load(path)
    script.install()
    return script


def install_from_env(environ: Mapping[str, str] | None = None) -> ScriptedModel | None:
    """Install the script named by ``LITTLE_SCRIPTED_MODEL``, if set (worker start-up)."""
    env = os.environ if environ is None else environ
    path = env.get(SCRIPT_ENV_VAR)
    if not path:
        return None
    return install_from_file(path)


def _append_record(path: Path, record: Mapping[str, Any]) -> None:
    line = (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8")
    # One locked append per call keeps lines whole when several processes share the log.
    with path.open("ab") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            handle.write(line)
            handle.flush()
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_call_log(path: str | Path) -> list[dict[str, Any]]:
    """Every record of a JSON-lines call log, in append order (empty if it does not exist)."""
    source = Path(path)
    if not source.exists():
        return []
    with source.open("rb") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH)
        try:
            text = handle.read().decode("utf-8")
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
    return [json.loads(line) for line in text.splitlines() if line.strip()]
