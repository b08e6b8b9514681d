"""Secrets out of errors, events and logs: :func:`redact` and :class:`RedactingFilter`.

Exception texts from model providers (litellm), HTTP clients and tools can carry
credentials: a key in a request URL (``?key=AIza...``), an ``Authorization: Bearer ...``
header echoed back, ``api_key='sk-...'`` in a repr. :func:`redact` replaces them with
``[REDACTED]``:

* ``Authorization`` / ``Proxy-Authorization`` header values, and any ``Bearer`` token;
* values of credential-named fields (``api_key``, ``x-api-key``, ``access_token``,
  ``client_secret``, ``password``, ``aws_secret_access_key``, ...) written ``name=value`` or
  ``name: value``, quoted or not (a name that ends a file path is the path's, not a field:
  ``'/etc/passwd': permission denied`` stays as it is);
* credential query parameters of URLs (``key=``, ``token=``, ``sig=``, ``X-Amz-Signature=``,
  ...);
* the password in a URL's user info (``redis://:PASSWORD@host``);
* strings shaped like provider keys wherever they appear: ``sk-...`` (OpenAI, Anthropic,
  OpenRouter), ``AIza...`` (Google), ``AKIA...``/``ASIA...`` (AWS key ids), ``ghp_...`` and
  ``github_pat_...`` (GitHub), ``gsk_...`` (Groq), ``hf_...`` (Hugging Face), ``xai-...``,
  ``r8_...`` (Replicate), ``xox?-...`` (Slack) and JSON Web Tokens.

Content-addressed names stay as they are: ``sha256:<hex>`` digests and the engine's ids
(``run_...``, ``wfver_...``, ``evt_...``, ``art_...``) match none of these shapes.

It is applied where foreign text becomes ours: error envelopes (step, tool and model
failures), the planner's model failures, the CLI's one-line errors, and every log record of
a fleet process or the CLI (:func:`install_log_redaction` puts :class:`RedactingFilter` on
the handlers, so records of every logger, their formatted messages and their tracebacks
pass through it). Only error texts and log lines pass through it, never a step's output.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Final

__all__ = ["REDACTED", "RedactingFilter", "install_log_redaction", "redact"]

REDACTED: Final = "[REDACTED]"

# Never re-redact a value that already is the marker (redacting twice changes nothing).
_NOT_DONE = r"(?!\[REDACTED\])"
# A value: up to a quote, a space, or a separator that ends a field.
_VALUE = _NOT_DONE + r"[^\s\"'&,;<>(){}\[\]]+"

# A credential's name is a name, not the last part of a file path: ``'/etc/passwd': permission
# denied`` names a file, and the words after it are not a password.
_NOT_IN_PATH = r"(?<![A-Za-z0-9/\\])"

_HEADER = re.compile(
    r"(?i)(" + _NOT_IN_PATH + r"(?<!_)(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)"
    # Atomic: a scheme once read is not taken back to call the scheme itself the value.
    r"(?>(?:(bearer|basic|token|digest)\s+)?)" + _VALUE
)
_BEARER = re.compile(r"(?i)\b(bearer)\s+" + _NOT_DONE + r"[A-Za-z0-9\-._~+/]+=*")
_FIELD = re.compile(
    r"(?i)(" + _NOT_IN_PATH + r"(?:x-)?(?:api[-_]?key|api[-_]?token|access[-_]?token"
    r"|refresh[-_]?token|auth[-_]?token|id[-_]?token|client[-_]?secret|secret[-_]?key"
    r"|secret[-_]?access[-_]?key|aws[-_]?secret[-_]?access[-_]?key|session[-_]?token"
    r"|private[-_]?key|password|passwd|x-goog-api-key)"
    r"[\"']?\s*[:=]\s*[\"']?)" + _VALUE
)
_QUERY = re.compile(
    r"(?i)([?&](?:key|api[-_]?key|apikey|token|access[-_]?token|auth|sig|signature"
    r"|x-amz-signature|x-amz-credential|x-amz-security-token|secret|client[-_]?secret"
    r"|password)=)" + _NOT_DONE + r"[^&\s#\"'<>]+"
)
_USERINFO = re.compile(
    r"(?i)(\b[a-z][a-z0-9+.\-]*://[^\s/:@\"']*:)" + _NOT_DONE + r"[^\s@/\"']+(@)"
)
_KEY_SHAPES = re.compile(
    r"(?<![A-Za-z0-9])(?:"
    r"sk-[A-Za-z0-9_\-]{16,}"
    r"|AIza[0-9A-Za-z_\-]{30,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|gh[pousr]_[A-Za-z0-9]{30,}"
    r"|github_pat_[A-Za-z0-9_]{30,}"
    r"|gsk_[A-Za-z0-9]{20,}"
    r"|hf_[A-Za-z0-9]{20,}"
    r"|xai-[A-Za-z0-9]{20,}"
    r"|r8_[A-Za-z0-9]{20,}"
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}"
    r"|eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"
    r")"
)

# Every pattern above needs one of these (lowercase) in the text. One search for them in
# the lowered text (about 3 µs for a log line; the patterns with IGNORECASE take 15 to
# 25 µs) decides whether the substitutions run at all: most texts, and nearly every log
# line, contain none.
_TRIGGER = re.compile(
    r"sk-|aiza|akia|asia|gh[pousr]_|github_pat_|gsk_|hf_|xai-|r8_|xox|eyj|bearer|authoriz"
    r"|key|token|secret|passw|sig|auth|x-amz|://"
)


def redact(text: str) -> str:
    """``text`` with credentials replaced by ``[REDACTED]`` (``text`` itself when it has
    none)."""
    if not text or _TRIGGER.search(text.lower()) is None:
        return text
    cleaned = _HEADER.sub(lambda m: f"{m[1]}{m[2] + ' ' if m[2] else ''}{REDACTED}", text)
    cleaned = _BEARER.sub(lambda m: f"{m[1]} {REDACTED}", cleaned)
    cleaned = _FIELD.sub(lambda m: f"{m[1]}{REDACTED}", cleaned)
    cleaned = _QUERY.sub(lambda m: f"{m[1]}{REDACTED}", cleaned)
    cleaned = _USERINFO.sub(lambda m: f"{m[1]}{REDACTED}{m[2]}", cleaned)
    cleaned = _KEY_SHAPES.sub(REDACTED, cleaned)
    return text if cleaned == text else cleaned


class RedactingFilter(logging.Filter):
    """Scrubs a log record's message, traceback and stack with :func:`redact`.

    On a handler it sees the records of every logger that reaches the handler. A record
    whose traceback it scrubbed keeps the text (``exc_text``, which formatters print) and
    drops the exception itself, so no formatter renders the raw text again.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: the handler reports it as it would have
            return True
        cleaned = redact(message)
        if cleaned is not message:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
            record.exc_info = None
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


def install_log_redaction(loggers: Iterable[logging.Logger] = ()) -> None:
    """Put a :class:`RedactingFilter` on every handler of the root logger, of ``loggers``,
    and on Python's last-resort handler (which prints warnings when nothing is configured).
    Calling it again adds no second filter."""
    handlers: list[logging.Handler] = list(logging.getLogger().handlers)
    for logger in loggers:
        handlers += logger.handlers
    if logging.lastResort is not None:
        handlers.append(logging.lastResort)
    for handler in handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
