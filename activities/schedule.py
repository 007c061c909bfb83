"""Built-in activities of the schedule: logging defaults and HTTP webhooks.

Registered names (the schedule calls activities by name, so these are what a worker needs
for the defaults, and what a user's own service in any SDK replaces):

- ``run`` / ``on_outcome``: log the run / its outcome (the default, so a demo needs no code).
- ``run_webhook`` / ``on_outcome_webhook``: POST JSON to ``params["url"]`` (the outcome to
  ``params.get("outcome_url", params["url"])``) with ``Idempotency-Key: <idempotency_key>``;
  a non-2xx answer raises, so Temporal retries under the schedule's policy.
- ``lifecycle``: log a lifecycle event (S12).

``outcome_retry`` lifecycle events are known only where the failed attempt ran, so they come
from the outcome activities here (and from :func:`outcome_retry_events`, for users writing
their own outcome activity in Python): an OpenTelemetry span event on the activity's span and
a log line on ``durability.schedule.lifecycle``. An outcome activity hosted elsewhere yields
only the workflow-side events.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import httpx
from opentelemetry import trace
from temporalio import activity
from temporalio.exceptions import ApplicationError

from workflows.schedule.models import (
    Outcome,
    RunError,
    ScheduledRunObject,
    lifecycle_event,
    lifecycle_span_attributes,
)

log = logging.getLogger("durability.schedule")
lifecycle_log = logging.getLogger("durability.schedule.lifecycle")

DEFAULT_HEARTBEAT_PERIOD = timedelta(seconds=5)


@asynccontextmanager
async def heartbeating(period: timedelta | None = None) -> AsyncIterator[None]:
    """Heartbeat in the background while the block runs, so a long call stays alive and
    sees cancellation (delivered with a heartbeat's response)."""
    timeout = activity.info().heartbeat_timeout
    if period is None:
        period = timeout / 3 if timeout else DEFAULT_HEARTBEAT_PERIOD

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(period.total_seconds())

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()


def _wall_ms() -> int:
    return int(time.time() * 1000)


def emit_lifecycle(event: dict[str, Any]) -> None:
    """Record a lifecycle event from activity code: a span event and a log line."""
    attributes = lifecycle_span_attributes(event)
    trace.get_current_span().add_event(f"durability.scheduled_run.{event['type']}", attributes)
    lifecycle_log.info("%s", json.dumps(event, sort_keys=True))


def _next_attempt_delay_ms(attempt: int) -> int:
    policy = activity.info().retry_policy
    if policy is None:
        return 1000
    initial = policy.initial_interval.total_seconds() * 1000
    delay = initial * policy.backoff_coefficient ** (attempt - 1)
    if policy.maximum_interval is not None:
        delay = min(delay, policy.maximum_interval.total_seconds() * 1000)
    return int(delay)


def _will_retry(error: BaseException) -> bool:
    if isinstance(error, ApplicationError) and error.non_retryable:
        return False
    info = activity.info()
    policy = info.retry_policy
    if policy is None or policy.maximum_attempts == 0:
        return True
    non_retryable = policy.non_retryable_error_types or ()
    if type(error).__name__ in non_retryable or (
        isinstance(error, ApplicationError) and error.type in non_retryable
    ):
        return False
    return info.attempt < policy.maximum_attempts


@asynccontextmanager
async def outcome_retry_events(run: ScheduledRunObject) -> AsyncIterator[None]:
    """Wrap an outcome delivery: when it fails and Temporal will retry it, emit the
    `outcome_retry` lifecycle event (S12) before re-raising."""
    try:
        yield
    except asyncio.CancelledError:
        raise
    except Exception as error:
        if _will_retry(error):
            attempt = activity.info().attempt
            now = _wall_ms()
            message = error.message if isinstance(error, ApplicationError) else str(error)
            name = (error.type if isinstance(error, ApplicationError) else None) or type(
                error
            ).__name__
            emit_lifecycle(
                lifecycle_event(
                    "outcome_retry",
                    run.idempotency_key,
                    run.scheduled_time,
                    now,
                    attempt=attempt,
                    error=RunError(name=name, message=message).model_dump(),
                    next_attempt_at=now + _next_attempt_delay_ms(attempt),
                )
            )
        raise


class WebhookError(Exception):
    """Raised (as an ApplicationError of this type) when a webhook answers non-2xx."""


class ScheduleActivities:
    """The built-in schedule activities, with their HTTP client injected."""

    def __init__(self, http: httpx.AsyncClient | None = None) -> None:
        self._http = http or httpx.AsyncClient(timeout=httpx.Timeout(30.0))

    @activity.defn(name="run")
    async def log_run(self, run: ScheduledRunObject) -> None:
        """Default run: log it."""
        log.info("scheduled run %s (due at %s)", run.idempotency_key, run.due_at)

    @activity.defn(name="on_outcome")
    async def log_outcome(self, run: ScheduledRunObject, outcome: Outcome) -> None:
        """Default outcome handler: log it."""
        log.info(
            "outcome of %s (delivery attempt %s): %s",
            run.idempotency_key,
            activity.info().attempt,
            outcome.wire(),
        )

    @activity.defn(name="lifecycle")
    async def log_lifecycle(self, event: dict[str, Any]) -> None:
        """Default lifecycle activity: log the event."""
        lifecycle_log.info("%s", json.dumps(event, sort_keys=True))

    @activity.defn(name="run_webhook")
    async def run_webhook(self, run: ScheduledRunObject) -> None:
        """POST the run to `params["url"]`; non-2xx raises."""
        body = run.model_dump(mode="json")
        await self._post(_url(run, "url"), body, run.idempotency_key)

    @activity.defn(name="on_outcome_webhook")
    async def outcome_webhook(self, run: ScheduledRunObject, outcome: Outcome) -> None:
        """POST `{run, outcome, attempt}` to `params.get("outcome_url", params["url"])`."""
        url = run.params.get("outcome_url") or _url(run, "url")
        body = {
            "run": run.model_dump(mode="json"),
            "outcome": outcome.wire(),
            "attempt": activity.info().attempt,
        }
        async with outcome_retry_events(run):
            await self._post(str(url), body, run.idempotency_key)

    async def _post(self, url: str, body: dict[str, Any], key: str) -> None:
        async with heartbeating():
            try:
                response = await self._http.post(url, json=body, headers={"Idempotency-Key": key})
            except httpx.HTTPError as error:
                raise ApplicationError(
                    f"POST {url} failed: {error!r}", type="WebhookTransportError"
                ) from error
        if not response.is_success:
            raise ApplicationError(
                f"POST {url} answered {response.status_code}: {response.text[:200]}",
                type=WebhookError.__name__,
            )


def _url(run: ScheduledRunObject, key: str) -> str:
    url = run.params.get(key)
    if not isinstance(url, str) or not url:
        raise ApplicationError(
            f"params.{key} must be the webhook URL, got {url!r}",
            type="WebhookConfigurationError",
            non_retryable=True,
        )
    return url


def schedule_activities(http: httpx.AsyncClient | None = None) -> list[Callable[..., Any]]:
    """The built-in schedule activities to register on a worker."""
    activities = ScheduleActivities(http)
    return [
        activities.log_run,
        activities.log_outcome,
        activities.log_lifecycle,
        activities.run_webhook,
        activities.outcome_webhook,
    ]
