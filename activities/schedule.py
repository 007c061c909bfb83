"""Built-in activities of the schedule: logging defaults and HTTP webhooks.

Registered names (the schedule calls activities by name, so these are what a worker needs
for the defaults, and what a user's own service in any SDK replaces):

- ``run`` / ``on_outcome``: log the run / its outcome (the default, so a demo needs no code).
- ``run_webhook`` / ``on_outcome_webhook``: POST JSON to ``params["url"]`` (the outcome to
  ``params.get("outcome_url", params["url"])``) with ``Idempotency-Key: <idempotency_key>``;
  a non-2xx answer raises, so Temporal retries under the schedule's policy. Only URLs under a
  prefix of the operator's ``DURABILITY_WEBHOOK_ALLOWED_URLS`` are called (see
  :class:`WebhookAllowlist`): whoever may ``set`` a schedule chooses the URL, so without the
  list every worker would be an open proxy (cloud metadata, loopback admin ports) whose
  answers end up in the run's error. Unset or empty, every webhook is refused.
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
import os
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NoReturn

import httpx
from opentelemetry import trace
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from workflows import metrics
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
# How much of a refusing webhook's answer goes into the error (and so the run's history).
_EXCERPT_CHARS = 200


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
            activity.metric_meter().create_counter(
                metrics.OUTCOME_DELIVERIES, metrics.DESCRIPTIONS[metrics.OUTCOME_DELIVERIES]
            ).with_additional_attributes({"result": "retried"}).add(1)
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


class WebhookNotAllowed(Exception):
    """Raised (as a non-retryable ApplicationError of this type) for a refused webhook URL."""


ALLOWED_URLS_ENV = "DURABILITY_WEBHOOK_ALLOWED_URLS"
_DEFAULT_PORTS = {"http": 80, "https": 443}
# `http://127.0.0.1:*/`: any port of that host (the authority ends with `:*`).
_ANY_PORT_ENTRY = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*):\*(?P<tail>[/?#].*)?")
_SHOWN_URL_CHARS = 300


class WebhookAllowlistError(ValueError):
    """A malformed `DURABILITY_WEBHOOK_ALLOWED_URLS` entry; the message names the entry."""


def _dot_segments(path: str) -> bool:
    """Whether a (percent-decoded) path has `.` or `..` segments (`\\` counted as `/`,
    as some servers do): a server resolving them would leave the allowed prefix."""
    return any(segment in (".", "..") for segment in re.split(r"[/\\]", path))


def _raw_path(url: httpx.URL) -> str:
    return url.raw_path.split(b"?", 1)[0].decode("ascii", errors="replace") or "/"


@dataclass(frozen=True)
class WebhookUrlPrefix:
    """One allowed prefix: scheme, lowercased host, effective port (None: any) and path."""

    scheme: str
    host: str
    port: int | None
    path: str

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{'*' if self.port is None else self.port}{self.path}"

    def matches(self, url: httpx.URL) -> bool:
        """Same scheme, host and effective port; the raw path under ours on a `/` boundary
        (`/hooks` allows `/hooks` and `/hooks/x`, not `/hooksevil`; `/hooks/` needs the
        slash)."""
        if (
            url.scheme != self.scheme
            or url.raw_host.decode("ascii", errors="replace").lower() != self.host
        ):
            return False
        if self.port is not None and (url.port or _DEFAULT_PORTS[url.scheme]) != self.port:
            return False
        path = _raw_path(url)
        if self.path.endswith("/"):
            return path.startswith(self.path)
        return path == self.path or path.startswith(f"{self.path}/")


def _parse_prefix(entry: str) -> WebhookUrlPrefix:
    def malformed(problem: str) -> WebhookAllowlistError:
        return WebhookAllowlistError(f"{ALLOWED_URLS_ENV} entry {entry!r} {problem}")

    text, any_port = entry, False
    if match := _ANY_PORT_ENTRY.fullmatch(entry):
        text, any_port = match["head"] + (match["tail"] or ""), True
        authority = match["head"].split("://", 1)[1]
        if re.search(r":[0-9]*$", authority):
            raise malformed("names both a port and ':*'")
    try:
        url = httpx.URL(text)
    except (httpx.InvalidURL, ValueError) as error:
        raise malformed(f"is not a URL ({error})") from None
    if url.scheme not in _DEFAULT_PORTS:
        raise malformed("must start with http:// or https://")
    if not url.raw_host:
        raise malformed("has no host")
    if url.userinfo or "@" in text.split("://", 1)[-1].split("/", 1)[0]:
        raise malformed("must not carry user info ('user@')")
    if url.query or url.fragment or "?" in text or "#" in text:
        raise malformed("must not have a query or fragment")
    if url.port is not None and not 0 < url.port < 65536:
        raise malformed(f"has an invalid port {url.port}")
    if _dot_segments(url.path):
        raise malformed("must not have '.' or '..' path segments")
    try:
        host = url.raw_host.decode("ascii").lower()
    except UnicodeDecodeError:
        raise malformed("has a host that is not ASCII") from None
    port = None if any_port else (url.port or _DEFAULT_PORTS[url.scheme])
    return WebhookUrlPrefix(scheme=url.scheme, host=host, port=port, path=_raw_path(url))


@dataclass(frozen=True)
class WebhookAllowlist:
    """The URL prefixes the webhook activities may POST to (`DURABILITY_WEBHOOK_ALLOWED_URLS`).

    The setting is a comma-separated list of prefixes such as
    `https://hooks.example.com/,http://127.0.0.1:8080/`; `http://127.0.0.1:*/` allows any
    port of a host. A URL is allowed when it is http(s), carries no user info, has no `.`/`..`
    path segments, and one prefix has its scheme, host (compared lowercased, as written: no
    DNS lookup, so a name that resolves elsewhere later is not caught), effective port and a
    path under the prefix's on a `/` boundary. Matching uses the parsed URL (the one that is
    then requested), never the string, so `https://hooks.example.com.evil.net/` and
    `https://hooks.example.com@evil.net/` do not pass `https://hooks.example.com/`.
    Empty (the default), every URL is refused.
    """

    prefixes: tuple[WebhookUrlPrefix, ...] = ()

    @classmethod
    def parse(cls, value: str | None) -> WebhookAllowlist:
        """Parse the setting's value; a malformed entry raises WebhookAllowlistError."""
        entries = [entry.strip() for entry in (value or "").split(",")]
        return cls(tuple(_parse_prefix(entry) for entry in entries if entry))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WebhookAllowlist:
        """The allowlist from `DURABILITY_WEBHOOK_ALLOWED_URLS` (default: this process's)."""
        return cls.parse((os.environ if env is None else env).get(ALLOWED_URLS_ENV))

    def __str__(self) -> str:
        return ",".join(str(prefix) for prefix in self.prefixes) or "(none)"

    def check(self, url: str) -> httpx.URL:
        """The parsed URL to request, or a non-retryable `WebhookNotAllowed` ApplicationError
        naming the URL and the setting."""
        try:
            parsed = httpx.URL(url)
        except (httpx.InvalidURL, ValueError) as error:
            self._refuse(url, f"it is not a valid URL ({error})")
        if parsed.scheme not in _DEFAULT_PORTS:
            self._refuse(url, "only http:// and https:// URLs may be called")
        if not parsed.raw_host:
            self._refuse(url, "it has no host")
        if parsed.userinfo:
            self._refuse(url, "it carries user info ('user@')")
        if _dot_segments(parsed.path):
            self._refuse(url, "its path has '.' or '..' segments")
        if not self.prefixes:
            self._refuse(url, f"{ALLOWED_URLS_ENV} is unset or empty on this worker")
        if not any(prefix.matches(parsed) for prefix in self.prefixes):
            self._refuse(url, "it is under none of the allowed URL prefixes")
        return parsed

    @staticmethod
    def _refuse(url: str, reason: str) -> NoReturn:
        shown = url if len(url) <= _SHOWN_URL_CHARS else f"{url[:_SHOWN_URL_CHARS]}..."
        raise ApplicationError(
            f"webhook URL {shown!r} refused: {reason}; the worker's operator lists the URL "
            f"prefixes webhooks may call in {ALLOWED_URLS_ENV}",
            type=WebhookNotAllowed.__name__,
            non_retryable=True,
        )


class ScheduleActivities:
    """The built-in schedule activities, with their HTTP client and webhook allowlist
    injected (default: a client of our own and `DURABILITY_WEBHOOK_ALLOWED_URLS`, parsed once
    here; a malformed value raises WebhookAllowlistError).

    Webhook redirects are never followed (every POST passes `follow_redirects=False`, even on
    an injected client that would follow them): a 3xx is a non-2xx answer, a retryable
    WebhookError, so an allowed server cannot bounce the worker to an address outside the
    list.
    """

    def __init__(
        self,
        http: httpx.AsyncClient | None = None,
        allowed_urls: WebhookAllowlist | None = None,
    ) -> None:
        self._http = http or httpx.AsyncClient(timeout=httpx.Timeout(30.0), follow_redirects=False)
        self._allowed = WebhookAllowlist.from_env() if allowed_urls is None else allowed_urls

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
        url = _url(run, "outcome_url" if run.params.get("outcome_url") else "url")
        body = {
            "run": run.model_dump(mode="json"),
            "outcome": outcome.wire(),
            "attempt": activity.info().attempt,
        }
        async with outcome_retry_events(run):
            await self._post(url, body, run.idempotency_key)

    async def _post(self, url: str, body: dict[str, Any], key: str) -> None:
        target = self._allowed.check(url)  # before any network access
        async with heartbeating():
            try:
                response = await self._http.post(
                    target,
                    json=body,
                    headers={"Idempotency-Key": key},
                    follow_redirects=False,  # a redirect could leave the allowlist
                )
            except httpx.HTTPError as error:
                raise _webhook_failure(
                    f"POST {url} failed: {error!r}",
                    "WebhookTransportError",
                    far_side=isinstance(error, httpx.TransportError),
                ) from error
        if not response.is_success:
            redirect = " (webhook redirects are not followed)" if response.is_redirect else ""
            raise _webhook_failure(
                f"POST {url} answered {response.status_code}{redirect}: "
                f"{response.text[:_EXCERPT_CHARS]}",
                WebhookError.__name__,
                far_side=response.status_code in _FAR_SIDE_STATUSES,
            )


# Answers that say the far side is down, overloaded or slow, not that the request is wrong.
_FAR_SIDE_STATUSES = frozenset({408, 425, 429, *range(500, 600)})


def _webhook_failure(message: str, type: str, *, far_side: bool) -> ApplicationError:
    """The retryable error a failed webhook call raises.

    A far-side failure (`far_side`: unreachable, timed out, 408/425/429/5xx) that Temporal
    will retry is expected: it is raised as a benign error, which the SDK's worker logs at
    DEBUG without a traceback, and logged here as one warning line. Anything else (another
    4xx or 3xx, the last attempt) is logged by the SDK as every activity failure is.
    """
    error = ApplicationError(message, type=type)
    if not far_side or not _will_retry(error):
        return error
    log.warning("%s (attempt %d; retried)", message, activity.info().attempt)
    return ApplicationError(message, type=type, category=ApplicationErrorCategory.BENIGN)


def _url(run: ScheduledRunObject, key: str) -> str:
    url = run.params.get(key)
    if not isinstance(url, str) or not url:
        raise ApplicationError(
            f"params.{key} must be the webhook URL, got {url!r}",
            type="WebhookConfigurationError",
            non_retryable=True,
        )
    return url


def schedule_activities(
    http: httpx.AsyncClient | None = None, allowed_urls: WebhookAllowlist | None = None
) -> list[Callable[..., Any]]:
    """The built-in schedule activities to register on a worker; the webhooks call only
    URLs in `allowed_urls` (default: `DURABILITY_WEBHOOK_ALLOWED_URLS`)."""
    activities = ScheduleActivities(http, allowed_urls)
    return [
        activities.log_run,
        activities.log_outcome,
        activities.log_lifecycle,
        activities.run_webhook,
        activities.outcome_webhook,
    ]
