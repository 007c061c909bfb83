"""The schedule's calls of `DurabilityClient` (docs/contract.md section 2), by object ID."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from contextlib import suppress
from typing import TYPE_CHECKING, Any, TypedDict

from temporalio.client import WorkflowFailureError, WorkflowHandle, WorkflowQueryFailedError

from durability.checks import (
    SCHEDULE_ID_PREFIX,
    cancel_payload,
    check,
    checked,
    now_ms,
    schedule_start_input,
    schedule_workflow_id,
    set_payload,
)
from durability.errors import summary_for
from durability.listing import Listed, list_workflows
from durability.sending import SCHEDULE_WORKFLOW, ClientCore, WithStart
from workflows import search_attributes

if TYPE_CHECKING:
    from workflows.schedule.cron import NextOccurrence


class ScheduleView(TypedDict):
    """`get` query result."""

    expression: str
    version: int
    jitter_ms: int
    next_at: int | None
    params: dict[str, Any]
    # Not in the query's answer: the client adds the `paused` query's, and while paused the
    # `pause_note` query's (None otherwise).
    paused: bool
    pause_note: str | None


class RunView(TypedDict):
    """One entry of the `runs` query."""

    scheduled_time: int
    due_at: int
    state: str
    attempt: int
    error: Any


def preview_schedule(
    expression: str,
    *,
    after_ms: int | None = None,
    count: int = 10,
    jitter_ms: int = 0,
    dst_policy: Mapping[str, Any] | None = None,
    next_occurrence: NextOccurrence | None = None,
) -> list[int]:
    """The next `count` fire times (epoch ms) of a schedule set to `expression` at
    `after_ms` (default now) with a fixed `jitter_ms` and a `dst_policy` (the start field):
    computed by the code the schedule runs, creating nothing. ValueError (InvalidRequest)
    naming the field as `set` (or a start input) refuses."""
    from workflows.schedule import preview
    from workflows.schedule.models import ScheduleInput
    from workflows.validation import configured

    start = now_ms() if after_ms is None else after_ms
    settings = None
    if dst_policy is not None:
        raw = {"dst_policy": dict(dst_policy) if isinstance(dst_policy, Mapping) else dst_policy}
        settings = configured("preview", ScheduleInput(), raw, {})
    return preview.next_times(
        expression,
        start,
        count,
        jitter_ms=jitter_ms,
        settings=settings,
        next_occurrence=next_occurrence,
    )


def _set_message(
    object_id: str,
    expression: str,
    version: int,
    jitter_ms: int | None,
    jitter_max_ms: int | None,
    params: Any,
    options: Any,
    next_occurrence: NextOccurrence | None,
) -> WithStart:
    """What `set_schedule` and `signal_set_schedule` send (`options` is the start input),
    checked as the workflow checks it (with the built-in cron reading unless
    `next_occurrence` is given)."""
    from workflows.schedule import cron, set_rules

    reading = next_occurrence or cron.next_occurrence
    start_input = schedule_start_input(object_id, options)
    payload = set_payload(expression, version, jitter_ms, jitter_max_ms, params)
    workflow_id = schedule_workflow_id(object_id)
    builtin = next_occurrence is None
    checked(
        workflow_id,
        "set",
        lambda: set_rules.parse_new_set(payload, reading, now_ms(), builtin=builtin),
    )
    return WithStart(SCHEDULE_WORKFLOW, workflow_id, start_input, "set", payload)


class ScheduleClient(ClientCore):
    """The schedule's calls (see `DurabilityClient`)."""

    def schedule_handle(self, object_id: str) -> WorkflowHandle[Any, Any]:
        return self.temporal.get_workflow_handle(schedule_workflow_id(object_id))

    async def set_schedule(
        self,
        object_id: str,
        expression: str,
        version: int,
        *,
        jitter_ms: int | None = None,
        jitter_max_ms: int | None = None,
        params: Mapping[str, Any] | None = None,
        options: Mapping[str, Any] | None = None,
        new: bool = False,
    ) -> bool:
        """Set (update-with-start); returns `applied`. `options` is the start input, read
        only when this call starts the schedule. `new` starts a new schedule under a closed
        ID (without its versions and dead letters); without it a closed ID is refused."""
        sent = _set_message(
            object_id, expression, version, jitter_ms, jitter_max_ms, params, options,
            self.next_occurrence,
        )  # fmt: skip
        return bool(await self._update_with_start(sent, bool, new=new))

    async def signal_set_schedule(
        self,
        object_id: str,
        expression: str,
        version: int,
        *,
        jitter_ms: int | None = None,
        jitter_max_ms: int | None = None,
        params: Mapping[str, Any] | None = None,
        options: Mapping[str, Any] | None = None,
        new: bool = False,
    ) -> None:
        """Set by signal-with-start: fire and forget, once checked as the workflow checks it
        (a signal it refuses would be dropped unseen)."""
        sent = _set_message(
            object_id, expression, version, jitter_ms, jitter_max_ms, params, options,
            self.next_occurrence,
        )  # fmt: skip
        await self._signal_with_start(sent, new=new)

    async def cancel_schedule(self, object_id: str, version: int | None = None) -> bool:
        """Cancel future ticks; returns whether a schedule was live. Creates nothing: an ID
        with no schedule raises NotFoundError."""
        workflow_id = schedule_workflow_id(object_id)
        return bool(await self._send(workflow_id, "schedule.cancel", cancel_payload(version), bool))

    async def close_schedule(self, object_id: str, *, wait: bool = False) -> None:
        """End the schedule workflow for good (Temporal's cancellation request): it starts no
        run from now on and closes as cancelled once every run it started has reported, its
        outcome delivered (docs/contract.md 6.3). With `wait`, return once it has closed. An
        ID with no schedule raises NotFoundError, a closed one ClosedError."""
        workflow_id = schedule_workflow_id(object_id)
        why = await self._closed_or_missing(workflow_id)
        if why is not None:
            raise why
        if wait:
            await self._require_worker_of(
                workflow_id,
                "the close was not sent, as waiting for it would never end (without waiting "
                "it is sent, and taken once a worker polls)",
            )
        handle = self.temporal.get_workflow_handle(workflow_id)
        await self._sending(
            f"the close of {summary_for(workflow_id)}",
            handle.cancel(),
            means=f"{summary_for(workflow_id)} is closing: it starts no run and closes once "
            "the runs it started have reported",
        )
        if wait:
            with contextlib.suppress(WorkflowFailureError):  # it ends cancelled: that is done
                await handle.result()

    async def signal_cancel_schedule(self, object_id: str, version: int | None = None) -> None:
        """`cancel` by signal, checked first as the schedule checks it: a signal it refuses
        would be dropped unseen."""
        workflow_id = schedule_workflow_id(object_id)
        await self._send(workflow_id, "schedule.cancel", cancel_payload(version), as_signal=True)

    async def pause_schedule(self, object_id: str, note: str | None = None) -> bool:
        """Stop ticks until unpaused, with an optional `note` saying why (it replaces the
        note of a schedule already paused); returns whether it was running (False: already
        paused). Versions are untouched."""
        payload = {} if note is None else {"note": note}
        return bool(
            await self._send(schedule_workflow_id(object_id), "schedule.pause", payload, bool)
        )

    async def pause_note(self, object_id: str) -> str | None:
        """Why the schedule is paused (the `pause` note, or the failed run that paused it
        under `pause_on_failure`), or None."""
        note: str | None = await self._query(schedule_workflow_id(object_id), "pause_note")
        return note

    async def unpause_schedule(self, object_id: str) -> bool:
        """Tick again from now (ticks missed while paused are skipped); returns whether it
        was paused."""
        return bool(await self._update(schedule_workflow_id(object_id), "unpause", {}, bool))

    async def trigger_schedule(self, object_id: str) -> int:
        """Record a run now, outside the expression; returns its scheduled_time (epoch ms)."""
        scheduled_time: int = await self._update(
            schedule_workflow_id(object_id), "trigger", {}, int
        )
        return scheduled_time

    async def dead_letters(self, object_id: str) -> list[dict[str, Any]]:
        """Outcomes whose delivery was given up (kept up to `max_dead_letters`)."""
        letters: list[dict[str, Any]] = await self._query(
            schedule_workflow_id(object_id), "dead_letters"
        )
        return letters

    async def redeliver(self, object_id: str, idempotency_key: str) -> bool:
        """Deliver a dead-lettered outcome again (same key, same retry policy); the letter
        leaves `dead_letters` once delivered."""
        started: bool = await self._update(
            schedule_workflow_id(object_id),
            "redeliver",
            {"idempotency_key": idempotency_key},
            bool,
        )
        return started

    async def backfill_schedule(self, object_id: str, start_at: int, end_at: int) -> list[int]:
        """Record runs for the expression's occurrences in [start_at, end_at) (epoch ms)."""
        times: list[int] = await self._update(
            schedule_workflow_id(object_id),
            "backfill",
            {"start_at": start_at, "end_at": end_at},
            list,
        )
        return times

    async def configure_schedule(
        self, object_id: str, changes: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Change start settings of a running schedule in place (docs/contract.md 2.2), e.g.
        `{"max_concurrent_runs": 3}`; returns the settings now in effect. Runs started
        before keep theirs. Checked first as the schedule checks it (RejectedError)."""
        result: dict[str, Any] = await self._configure(
            "schedule", schedule_workflow_id(object_id), changes
        )
        return result

    async def signal_configure_schedule(self, object_id: str, changes: Mapping[str, Any]) -> None:
        """`configure` by signal (as bulk operations send it), checked first on the
        schedule's current settings: a signal it refuses would be dropped unseen."""
        await self._configure("schedule", schedule_workflow_id(object_id), changes, as_signal=True)

    async def schedule_settings(self, object_id: str) -> dict[str, Any]:
        """The schedule's start settings in effect (the `settings` query)."""
        result: dict[str, Any] = await self._query(schedule_workflow_id(object_id), "settings")
        return result

    async def preview_set_schedule(
        self,
        object_id: str,
        expression: str,
        version: int,
        *,
        jitter_ms: int | None = None,
        jitter_max_ms: int | None = None,
        params: Mapping[str, Any] | None = None,
        count: int = 10,
    ) -> dict[str, Any]:
        """What `set_schedule` would do to the running schedule, sending nothing (it reads
        the schedule with queries): `before` and `after` (its next `count` fire times, epoch
        ms), `applied` and `changes` (`{field: [before, after]}`). RejectedError as the `set`
        would be refused."""
        from workflows.schedule import preview

        payload = set_payload(expression, version, jitter_ms, jitter_max_ms, params)
        return await self._preview(
            object_id,
            "set",
            lambda current, paused, settings: preview.set_preview(
                current, paused, settings, payload, now_ms(), count
            ),
        )

    async def preview_configure_schedule(
        self, object_id: str, changes: Mapping[str, Any], *, count: int = 10
    ) -> dict[str, Any]:
        """What `configure_schedule` would do, sending nothing: `before` and `after` fire
        times and `changes` (`{setting: [before, after]}`). RejectedError as it would be."""
        from workflows.schedule import preview

        return await self._preview(
            object_id,
            "configure",
            lambda current, paused, settings: preview.configure_preview(
                current, paused, settings, changes, now_ms(), count
            ),
        )

    async def _preview(
        self,
        object_id: str,
        message: str,
        compute: Callable[[dict[str, Any] | None, bool, dict[str, Any]], dict[str, Any]],
    ) -> dict[str, Any]:
        """Read the running schedule (`get`, `paused`, `settings`) and compute what `message`
        would do to it, refused as the message would be; nothing is sent."""
        workflow_id = schedule_workflow_id(object_id)
        current: dict[str, Any] | None = await self._query(workflow_id, "get")
        paused = bool(await self._query(workflow_id, "paused"))
        settings: dict[str, Any] = await self._query(workflow_id, "settings")
        result: dict[str, Any] = {}
        checked(workflow_id, message, lambda: result.update(compute(current, paused, settings)))
        return result

    async def get_schedule(self, object_id: str) -> ScheduleView | None:
        """The live schedule with whether it is `paused`, or None (none set, or cancelled)."""
        workflow_id = schedule_workflow_id(object_id)
        view: dict[str, Any] | None = await self._query(workflow_id, "get")
        if view is None:
            return None
        paused = bool(await self._query(workflow_id, "paused"))
        note = await self._query(workflow_id, "pause_note") if paused else None
        return ScheduleView(**{**view, "paused": paused, "pause_note": note})  # type: ignore[typeddict-item]

    async def stored_version(self, object_id: str) -> int | None:
        """The version stored for `object_id`, a cancel tombstone's included, as the schedule
        publishes it (`DurabilityScheduleVersion`); None while none was ever set. With
        `get_schedule` returning None it tells a cancelled schedule from one never set."""
        workflow_id = schedule_workflow_id(object_id)
        handle = self.temporal.get_workflow_handle(workflow_id)
        description = await self._answer(workflow_id, "describe", handle.describe)
        version: int | None = description.typed_search_attributes.get(
            search_attributes.SCHEDULE_VERSION
        )
        return version

    async def describe(
        self, object_id: str, *, runs: int | None = None, next_times: int | None = None
    ) -> dict[str, Any]:
        """The `describe` query: the live schedule (as `get`, or None), `paused`, the last
        `runs` runs that ended (newest first, 0..10, default 10), the next `next_times` fire
        times (0..50, default 10), the counters and `dropped_signals` (signals
        the schedule refused and dropped)."""
        workflow_id = schedule_workflow_id(object_id)
        sizes = {
            key: value for key, value in (("runs", runs), ("next", next_times)) if value is not None
        }
        check(workflow_id, "schedule.describe", sizes)
        args = (sizes,) if sizes else ()
        described: dict[str, Any] = await self._query(workflow_id, "describe", *args)
        if "dropped_signals" not in described:
            # Counted by the schedule and answered by a query of its own.
            with suppress(WorkflowQueryFailedError):
                described["dropped_signals"] = await self._query(workflow_id, "dropped_signals")
        return described

    async def list_runs(self, object_id: str) -> list[RunView]:
        result: list[RunView] = await self._query(schedule_workflow_id(object_id), "runs")
        return result

    async def list_schedules(self, query: str | None = None, limit: int = 100) -> list[Listed]:
        """Schedules found by visibility: running ones, or those matching `query` (a raw
        visibility filter such as `DurabilityScheduleVersion > 2`), newest first."""
        return await list_workflows(
            self.temporal, SCHEDULE_WORKFLOW, SCHEDULE_ID_PREFIX, query, limit
        )
