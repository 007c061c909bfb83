"""Built-in activities of the operation ledger: `compile`, `submit`, `query` and their HTTP forms.

- `compile` (pass-through): canvases = sorted, deduplicated participants; the payload as is;
  `expected_versions` from `payload["expected_versions"]` when the intent carries them.
- `submit` / `query` (logging default): log the frozen request and answer `applied`, so a
  ledger works with no code.
- `http_submit` / `http_query`: POST the frozen body to `<base>/requests` and GET
  `<base>/requests/<id>`, both with `Idempotency-Key: <request id>`. 2xx: the JSON body is the
  status. 429/503: `unresolved` with `retry_after_ms` from `Retry-After`. 401/403: `blocked`.
  Network errors and anything unrecognised: `unresolved` (the ledger retries, L7).
  The base URL comes from `DURABILITY_LEDGER_URL` (default http://127.0.0.1:8080); point the
  ledger at them with `submit_activity="http_submit"`, `query_activity="http_query"`.
- `http_complete` (the completion webhook, `complete_activity="http_complete"`): POST
  `{"request": <frozen request>, "status": <whole status>}` to `<base>/complete` with the same
  `Idempotency-Key`. 2xx with an empty body, or JSON that is not an object with `blocked`, or
  `blocked: false`/`null`: accept (returns None). `{"blocked": true, "error"?: str}`: returned
  as is (the ledger blocks the request). Transport errors, 408, 425, 429 and 5xx raise a
  retryable `CompletionWebhookError` (Temporal retries it, as the compile is retried); any
  other answer (another 4xx, a 3xx, a 2xx body that is not JSON or a malformed `blocked`)
  raises it non-retryable: the request blocks at once (`completion_failed: ...`); a retryable
  one still failing after its 30-minute retry window blocks it as `completion_unavailable: ...`.

Write your own in any Temporal SDK: `compile(intent, request_id) -> compiled` and
`submit(frozen_request) -> status` / `query(frozen_request) -> status`, and optionally
`complete(frozen_request, status) -> null | {"blocked": true, "error"?: str}`
(docs/contract.md, section 3).
"""

from __future__ import annotations

import email.utils
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

LEDGER_URL_ENV = "DURABILITY_LEDGER_URL"
DEFAULT_LEDGER_URL = "http://127.0.0.1:8080"
KNOWN_OUTCOMES = frozenset({"applied", "rejected", "accepted", "unresolved"})
COMPLETION_ERROR = "CompletionWebhookError"
# Completion answers that say the far side is down, overloaded or slow: retried.
_RETRIED_STATUSES = frozenset({408, 425, 429, *range(500, 600)})
_EXCERPT_CHARS = 200

log = logging.getLogger("durability.ledger")


@activity.defn(name="compile")
async def compile_passthrough(intent: dict[str, Any], request_id: str) -> dict[str, Any]:
    """Freeze the intent as is: canvases from participants, payload unchanged.

    The result names the operation and request it was compiled for; the ledger checks them
    before it freezes anything.
    """
    payload = intent.get("payload")
    expected: Any = payload.get("expected_versions") if isinstance(payload, dict) else None
    return {
        "operation_id": intent.get("id"),
        "request_id": request_id,
        "kind": intent.get("operation_type"),
        "payload": payload,
        "canvas_ids": sorted(set(intent.get("participants") or [])),
        "expected_versions": expected if isinstance(expected, dict) else {},
        "protocol_version": intent.get("protocol_version", 1),
    }


@activity.defn(name="submit")
async def submit_logged(request: dict[str, Any]) -> dict[str, Any]:
    """Default submit: log the frozen request and answer `applied`."""
    activity.logger.info(
        "submit %s (%s) for %s", request.get("id"), request.get("kind"), request.get("canvas_ids")
    )
    return {"outcome": "applied"}


@activity.defn(name="query")
async def query_logged(request: dict[str, Any]) -> dict[str, Any]:
    """Default query: log and answer `applied`."""
    activity.logger.info("query %s", request.get("id"))
    return {"outcome": "applied"}


def retry_after_ms(value: str | None, now: float | None = None) -> int | None:
    """`Retry-After` as milliseconds: delta seconds or an HTTP date; None when absent/bad."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return int(text) * 1000
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    current = time.time() if now is None else now
    return max(0, int((when.timestamp() - current) * 1000))


def status_from_response(response: httpx.Response) -> dict[str, Any]:
    """Map an HTTP answer to a ledger status (see module docstring)."""
    code = response.status_code
    if code in (401, 403):
        return {
            "outcome": "unresolved",
            "blocked": True,
            "error": f"http {code}: {_brief(response)}",
        }
    if code in (429, 503):
        status: dict[str, Any] = {"outcome": "unresolved", "error": f"http {code}"}
        delay = retry_after_ms(response.headers.get("Retry-After"))
        if delay is not None:
            status["retry_after_ms"] = delay
        return status
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("outcome") in KNOWN_OUTCOMES:
        return body
    return {"outcome": "unresolved", "error": f"http {code}: {_brief(response)}"}


def _brief(response: httpx.Response) -> str:
    return response.text[:_EXCERPT_CHARS]


def completion_from_response(response: httpx.Response, url: str) -> dict[str, Any] | None:
    """Map the completion webhook's answer (see module docstring): None accepts, a blocked
    answer is returned, anything else raises `CompletionWebhookError`."""
    code = response.status_code
    if code in _RETRIED_STATUSES:
        raise completion_failure(f"POST {url} answered {code}: {_brief(response)}", retried=True)
    if not response.is_success:
        raise completion_failure(f"POST {url} answered {code}: {_brief(response)}", retried=False)
    if not response.content.strip():
        return None
    try:
        body = response.json()
    except ValueError:
        raise completion_failure(
            f"POST {url} answered {code} with a body that is not JSON: {_brief(response)}",
            retried=False,
        ) from None
    if not isinstance(body, dict) or body.get("blocked") in (None, False):
        return None
    error = body.get("error")
    if body["blocked"] is not True or not isinstance(error, str | None):
        shown = json.dumps(body)[:_EXCERPT_CHARS]
        raise completion_failure(
            f'POST {url} answered {shown}, expected {{"blocked": true, "error"?: str}}',
            retried=False,
        )
    return {"blocked": True} if error is None else {"blocked": True, "error": error}


def completion_failure(message: str, *, retried: bool) -> ApplicationError:
    """The `CompletionWebhookError` a failed completion call raises. A far-side failure that
    Temporal will retry is expected: benign (the SDK logs it at DEBUG), logged here as one
    warning line; the last attempt, or a non-retryable answer, is logged as any failure."""
    if not retried:
        return ApplicationError(message, type=COMPLETION_ERROR, non_retryable=True)
    info = activity.info()
    policy = info.retry_policy
    last = policy is not None and 0 < policy.maximum_attempts <= info.attempt
    if last:
        return ApplicationError(message, type=COMPLETION_ERROR)
    log.warning("%s (attempt %d; retried)", message, info.attempt)
    return ApplicationError(
        message, type=COMPLETION_ERROR, category=ApplicationErrorCategory.BENIGN
    )


class HttpLedgerActivities:
    """HTTP `submit`/`query` against `<base_url>/requests` (dependencies injected here)."""

    def __init__(self, base_url: str, timeout_s: float = 10.0) -> None:
        self._base = base_url.rstrip("/")
        self._timeout = timeout_s
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self._timeout)
        return self._client

    @staticmethod
    def _headers(request: Mapping[str, Any]) -> dict[str, str]:
        return {"Idempotency-Key": str(request.get("idempotency_key") or request["id"])}

    @activity.defn(name="http_submit")
    async def submit(self, request: dict[str, Any]) -> dict[str, Any]:
        """POST the frozen body; the answer is the status."""
        try:
            response = await self._http().post(
                f"{self._base}/requests", json=request, headers=self._headers(request)
            )
        except httpx.HTTPError as error:
            return {"outcome": "unresolved", "error": f"transport: {type(error).__name__}: {error}"}
        return status_from_response(response)

    @activity.defn(name="http_query")
    async def query(self, request: dict[str, Any]) -> dict[str, Any]:
        """GET the request's status by its ID."""
        url = f"{self._base}/requests/{quote(str(request['id']), safe='')}"
        try:
            response = await self._http().get(url, headers=self._headers(request))
        except httpx.HTTPError as error:
            return {"outcome": "unresolved", "error": f"transport: {type(error).__name__}: {error}"}
        return status_from_response(response)

    @activity.defn(name="http_complete")
    async def complete(
        self, request: dict[str, Any], status: dict[str, Any]
    ) -> dict[str, Any] | None:
        """POST `{"request", "status"}` to `<base>/complete`: None accepts, or a blocked answer."""
        url = f"{self._base}/complete"
        try:
            response = await self._http().post(
                url, json={"request": request, "status": status}, headers=self._headers(request)
            )
        except httpx.HTTPError as error:
            raise completion_failure(
                f"POST {url} failed: {type(error).__name__}: {error}", retried=True
            ) from error
        return completion_from_response(response, url)


def ledger_activities(base_url: str | None = None) -> list[Callable[..., Any]]:
    """The built-in ledger activities; HTTP base URL from `DURABILITY_LEDGER_URL`."""
    http = HttpLedgerActivities(base_url or os.environ.get(LEDGER_URL_ENV, DEFAULT_LEDGER_URL))
    return [
        compile_passthrough,
        submit_logged,
        query_logged,
        http.submit,
        http.query,
        http.complete,
    ]
