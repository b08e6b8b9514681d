"""``little_dist.redaction``: credentials out, everything else as it was.

Unit tests of :func:`redact` and :class:`RedactingFilter`; the end-to-end checks (a run whose
model call fails with a key in the error, on LocalWorld and on the fleet) are in
``tests/test_redaction_runs.py``.
"""

from __future__ import annotations

import io
import json
import logging

import pytest

from little_dist.redaction import REDACTED, RedactingFilter, install_log_redaction, redact

OPENAI = "sk-proj-abc123DEF456ghi789JKL012mno345PQR678stu901vwx"
ANTHROPIC = "sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe"
GOOGLE = "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW"
BEARER = "xyzBearerTok3n.0123456789-abcdefXYZ"
AWS_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"

# (text with a secret, the secret) -> the secret is gone and the marker is there.
SECRETS: list[tuple[str, str]] = [
    (f"Incorrect API key provided: {OPENAI}.", OPENAI),
    (f"invalid x-api-key {ANTHROPIC}", ANTHROPIC),
    (f"GET https://generativelanguage.googleapis.com/v1/models?key={GOOGLE}", GOOGLE),
    (f"GET https://api.example/v1/chat?alt=json&key=k-{BEARER}&page=2", f"k-{BEARER}"),
    (f"headers={{'Authorization': 'Bearer {BEARER}', 'Accept': 'json'}}", BEARER),
    (f'"authorization": "Bearer {BEARER}"', BEARER),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
    (f"proxy-authorization={BEARER}", BEARER),
    (f"sent bearer {BEARER} upstream", BEARER),
    (f"Completion(api_key='{BEARER}', model='x')", BEARER),
    (f'{{"api_key": "{BEARER}"}}', BEARER),
    (f"x-goog-api-key: {BEARER}", BEARER),
    (f"aws_secret_access_key={AWS_SECRET}", AWS_SECRET),
    (f"credentials {AWS_ID} rejected", AWS_ID),
    (f"client_secret={BEARER}&grant_type=client_credentials", BEARER),
    (f"https://x.example/cb?access_token={BEARER}#frag", BEARER),
    ("redis://:hunter2-redis-pass@redis:6379/0 unreachable", "hunter2-redis-pass"),
    ("rediss://fleet:s3cr3t-Pa55@redis.little.svc:6380/0", "s3cr3t-Pa55"),
    (f"token {JWT} expired", JWT),
    ("ghp_" + "a" * 36 + " is revoked", "ghp_" + "a" * 36),
    ("gsk_" + "B" * 40, "gsk_" + "B" * 40),
    ("password: correct-horse-battery", "correct-horse-battery"),
]


@pytest.mark.parametrize(("text", "secret"), SECRETS, ids=[s[:24] for _, s in SECRETS])
def test_credentials_are_replaced_by_the_marker(text: str, secret: str) -> None:
    cleaned = redact(text)
    assert secret not in cleaned
    assert REDACTED in cleaned


def test_what_surrounds_a_secret_stays() -> None:
    text = f"provider said 401 for https://api.example/v1/chat?key={GOOGLE}&alt=json (retry)"
    assert redact(text) == (
        f"provider said 401 for https://api.example/v1/chat?key={REDACTED}&alt=json (retry)"
    )
    assert redact(f"Authorization: Bearer {BEARER}") == f"Authorization: Bearer {REDACTED}"
    assert redact(f"key {OPENAI}.") == f"key {REDACTED}."


# Ordinary texts the engine writes: nothing in them is a credential.
LEGITIMATE = [
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "run_1ca625417f334b2e8b17957415a56a95",
    "wfver_0123456789abcdef evt_0123456789abcdef art_fedcba9876543210",
    "artifact://art_0123456789abcdef",
    "execute_step run_demo review[cand_1].score#2 (inline): completed",
    "model call to scripted/fast failed: RateLimitError: slow down (call #3)",
    "max_tokens=1024 temperature=0.2 top_p=1",
    "task-0123456789abcdef0123456789 and risk-assessment-step-with-a-long-name",
    "the key 'accountId' is missing; Authorization failed for user 'ops'",
    "redis://127.0.0.1:6379/15 and http://s3:8333/little?list-type=2&prefix=x",
    "http://host:8080/path@x and mailto:ops@example.com",
    "GET https://api.example/v1/items?page=2&limit=10",
    "https://api.example/v1/docs?keyword=primary&tokens=5",
    "Steps: s0, s1; waiting on StepAttemptStarted; askew-pattern; disk-usage",
    "",
]


@pytest.mark.parametrize("text", LEGITIMATE)
def test_legitimate_content_is_left_alone(text: str) -> None:
    assert redact(text) is text


@pytest.mark.parametrize(("text", "secret"), SECRETS[:8])
def test_redacting_twice_changes_nothing(text: str, secret: str) -> None:
    once = redact(text)
    assert redact(once) == once


# A table: file paths and ordinary words that merely contain a credential's name stay as they
# are (an error naming '/etc/passwd' once lost the words after it), while a credential field
# is still redacted however it is written.
KEPT_PATHS_AND_WORDS = [
    "cannot open '/etc/passwd': permission denied",
    "[Errno 13] Permission denied: '/etc/passwd'",
    "{'/etc/passwd': 'root:x:0:0'}",
    '"/etc/passwd": no such file',
    "/usr/bin/passwd: exited with status 1",
    "/home/ops/.config/api_key: no such file or directory",
    "read ./secrets/client_secret=old.json failed",
    "C:\\Users\\ops\\password: not found",
    "GET /v1/oauth/authorization: 404",
    "passwords: 3 rotated; tokens: 5 left; keyboard: us",
    "the password field is required",
    "secret_keys: 2 configured",
    "monkey: banana; turnkey=1; the key: value",
]
REDACTED_FIELDS = [
    ("password: correct-horse-battery", "correct-horse-battery"),
    ("passwd: hunter2", "hunter2"),
    ("db_password=hunter2-db", "hunter2-db"),
    ("PASSWORD=hunter2-env ./deploy", "hunter2-env"),
    ("{'password': 'hunter2-dict'}", "hunter2-dict"),
    ('{"client_secret": "cs-value-1"}', "cs-value-1"),
    ("export AWS_SECRET_ACCESS_KEY=aws-value-1", "aws-value-1"),
    ("settings.api_key = 'ak-value-1'", "ak-value-1"),
    ("x-api-key: xk-value-1", "xk-value-1"),
    ("Authorization: Bearer bt-value-1", "bt-value-1"),
    ("proxy-authorization=pa-value-1", "pa-value-1"),
]


@pytest.mark.parametrize("text", KEPT_PATHS_AND_WORDS)
def test_paths_and_words_that_contain_a_credential_name_are_kept(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize(("text", "secret"), REDACTED_FIELDS, ids=[s for _, s in REDACTED_FIELDS])
def test_credential_fields_are_still_redacted(text: str, secret: str) -> None:
    cleaned = redact(text)
    assert secret not in cleaned
    assert REDACTED in cleaned


def _capturing_logger(name: str) -> tuple[logging.Logger, io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger, stream


def test_the_filter_scrubs_messages_arguments_and_tracebacks() -> None:
    logger, stream = _capturing_logger("little.test.redaction")
    logger.info("calling %s with key=%s", "https://api.example/v1", OPENAI)
    try:
        try:
            raise ValueError(f"upstream refused Authorization: Bearer {BEARER}")
        except ValueError as inner:
            raise RuntimeError(f"model call failed: {GOOGLE}") from inner
    except RuntimeError:
        logger.exception("step %s failed", "draft")
    logger.warning("stack", stack_info=True, extra={"note": OPENAI})
    text = stream.getvalue()
    for secret in (OPENAI, BEARER, GOOGLE):
        assert secret not in text
    assert text.count(REDACTED) >= 3
    assert "step draft failed" in text and "Traceback (most recent call last)" in text
    assert "The above exception was the direct cause" in text


def test_a_child_loggers_records_are_scrubbed_by_the_handler_they_reach() -> None:
    parent, stream = _capturing_logger("little.test.parent")
    child = logging.getLogger("little.test.parent.child")
    child.propagate = True
    child.error("boom: %r", {"api_key": BEARER})
    assert BEARER not in stream.getvalue() and REDACTED in stream.getvalue()
    assert parent.handlers


def test_installing_twice_puts_one_filter_on_each_handler() -> None:
    logger = logging.getLogger("little.test.install")
    handler = logging.StreamHandler(io.StringIO())
    logger.handlers[:] = [handler]
    install_log_redaction([logger])
    install_log_redaction([logger])
    assert sum(isinstance(f, RedactingFilter) for f in handler.filters) == 1
    assert logging.lastResort is not None
    assert sum(isinstance(f, RedactingFilter) for f in logging.lastResort.filters) == 1


def test_the_schedulers_json_lines_are_scrubbed(capsys: pytest.CaptureFixture[str]) -> None:
    from little_dist.cli.scheduler_cmd import _configure_logging

    little = logging.getLogger("little")
    saved = (list(little.handlers), little.level, little.propagate)
    try:
        _configure_logging("INFO")
        log = logging.getLogger("little.scheduler")
        try:
            raise ConnectionError(f"GET https://api.example/v1?key={GOOGLE} refused")
        except ConnectionError:
            log.error('{"event": "run-error", "error": "api_key=%s"}', BEARER, exc_info=True)
    finally:
        little.handlers[:], little.level, little.propagate = saved
    (line,) = capsys.readouterr().err.splitlines()
    record = json.loads(line)
    assert record["event"] == "run-error" and record["error"] == f"api_key={REDACTED}"
    assert "Traceback" in record["exc"] and REDACTED in record["exc"]
    assert GOOGLE not in line and BEARER not in line
