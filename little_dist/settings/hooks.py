"""The settings of what the fleet does on its own clock: a run's callback (the signed POST
when it ends, :mod:`little_dist.fleet.callbacks`) and schedules (runs started by a cron
expression or an interval, :mod:`little_dist.fleet.schedules`)."""

from __future__ import annotations

from pydantic import SecretStr

from little_dist.settings.fields import _env, _FromEnvironment, _seconds


class HookSettings(_FromEnvironment):
    """Callbacks and schedules (read by the scheduler; the secret by nothing else)."""

    #: The HMAC key of callbacks (``whsec_`` + base64, or any text); unset: a run's callback
    #: is recorded as abandoned, never sent unsigned.
    callback_secret: SecretStr | None = _env(
        "LITTLE_CALLBACK_SECRET", None, "the callbacks' signing secret (whsec_... or any text)"
    )
    #: How long after a run's end its callback is still tried (then it is abandoned).
    callback_retry_for: float = _seconds("LITTLE_CALLBACK_RETRY_FOR", 900.0)
    #: The first wait after a failed attempt; each next one doubles, up to 60 s.
    callback_backoff: float = _seconds("LITTLE_CALLBACK_BACKOFF", 1.0)
    #: One attempt's timeout (connect and answer).
    callback_timeout: float = _seconds("LITTLE_CALLBACK_TIMEOUT", 10.0)
    #: How often a scheduler looks for schedules' ticks that are due.
    schedule_poll: float = _seconds("LITTLE_SCHEDULE_POLL", 1.0)
