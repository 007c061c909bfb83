"""What a `set` or a `configure` would do, computed by the code the workflow runs, sending
nothing: the next fire times (`ScheduleCore.next_fire_times`, as `describe` shows them) of a
schedule the change is applied to, and which fields change.

Pure: the client passes what the schedule's queries answered (`get`, `paused`, `settings`,
`describe`) and the time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workflows.schedule import cron
from workflows.schedule.core import ScheduleCore, initial_state, parse_configure
from workflows.schedule.cron import NextOccurrence
from workflows.schedule.crontab import DaylightSaving
from workflows.schedule.models import DstPolicy, ScheduleInput, ScheduleState, StoredSchedule
from workflows.schedule.set_rules import parse_new_set

MAX_PREVIEW_TIMES = 50


def daylight_saving(policy: DstPolicy) -> DaylightSaving:
    """A schedule's `dst_policy` as the cron reading takes it."""
    return DaylightSaving(nonexistent=policy.nonexistent, ambiguous=policy.ambiguous)


def schedule_reading(settings: ScheduleInput) -> NextOccurrence:
    """The built-in `next_occurrence` under a schedule's `dst_policy`."""
    dst = daylight_saving(settings.dst_policy)
    return lambda expression, after_ms: cron.next_occurrence(expression, after_ms, dst=dst)


def _count(count: int) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PREVIEW_TIMES:
        raise ValueError(f"count must be an integer in 1..{MAX_PREVIEW_TIMES}, got {count!r}")
    return count


def _pick_none(max_ms: int) -> int:
    # A jitter picked at random when the version is stored: the times are shown without it.
    return 0


def next_times(
    expression: str,
    after_ms: int,
    count: int = 10,
    *,
    jitter_ms: int = 0,
    settings: ScheduleInput | None = None,
    next_occurrence: NextOccurrence | None = None,
) -> list[int]:
    """The first `count` fire times (epoch ms, jitter included) of a schedule `set` to
    `expression` at `after_ms`, under `settings` (its bounds); InvalidRequest naming the
    field as `set` refuses it, ValueError for a bad `count`."""
    settings = settings or ScheduleInput()
    reading = next_occurrence or schedule_reading(settings)
    payload = {"expression": expression, "version": 1, "jitter_ms": jitter_ms}
    request = parse_new_set(payload, reading, after_ms, builtin=next_occurrence is None)
    core = ScheduleCore(initial_state(settings), reading, settings)
    core.set(request, after_ms, _pick_none)
    return core.next_fire_times(_count(count))


def set_preview(
    current: Mapping[str, Any] | None,
    paused: bool,
    settings: Mapping[str, Any],
    raw: Mapping[str, Any],
    now_ms: int,
    count: int = 10,
) -> dict[str, Any]:
    """What `set` of the payload `raw` would do to a schedule whose `get` answered `current`:
    `before` and `after` fire times, `applied` (its version is above the stored one), and
    `changes` (`{field: [before, after]}`). InvalidRequest as the `set` would be refused."""
    count = _count(count)
    settings_in = ScheduleInput.model_validate(dict(settings))
    request = parse_new_set(dict(raw), schedule_reading(settings_in), now_ms, builtin=True)
    before_core = _core(current, paused, settings_in)
    before = before_core.next_fire_times(count)
    applied = current is None or request.version > int(current["version"])
    if not applied:
        return {"applied": False, "before": before, "after": before, "changes": {}}
    after_core = _core(current, paused, settings_in)
    after_core.set(request, now_ms, _pick_none)
    stored = after_core.state.schedule
    assert stored is not None
    new = stored.model_dump(mode="json")
    old = dict(current or {})
    changes = {
        field: [old.get(field), value]
        for field, value in new.items()
        if field != "next_at" and old.get(field) != value
    }
    if not isinstance(request.jitter_ms, int):
        changes["jitter_ms"] = [old.get("jitter_ms"), {"max_ms": request.jitter_ms.max_ms}]
    return {
        "applied": True,
        "before": before,
        "after": after_core.next_fire_times(count),
        "changes": changes,
    }


def configure_preview(
    current: Mapping[str, Any] | None,
    paused: bool,
    settings: Mapping[str, Any],
    changes: Mapping[str, Any],
    now_ms: int,
    count: int = 10,
) -> dict[str, Any]:
    """What `configure` of `changes` would do: `before` and `after` fire times and the
    settings that change (`{field: [before, after]}`). InvalidRequest as it would be refused."""
    count = _count(count)
    settings_in = ScheduleInput.model_validate(dict(settings))
    configured = parse_configure(dict(changes), settings_in)
    before = _core(current, paused, settings_in).next_fire_times(count)
    core = _core(current, paused, configured)
    core.state.remaining_runs = settings_in.remaining_runs
    core.configure_bounds(configured, set(changes), now_ms)
    if configured.dst_policy != settings_in.dst_policy:  # as the workflow's `configure`
        core.revise_next_at(lambda expression, _: core.bounded_next(expression, now_ms))
    old_view, new_view = settings_in.model_dump(mode="json"), configured.model_dump(mode="json")
    changed = {
        field: [old_view.get(field), value]
        for field, value in new_view.items()
        if old_view.get(field) != value
    }
    return {"before": before, "after": core.next_fire_times(count), "changes": changed}


def _core(current: Mapping[str, Any] | None, paused: bool, settings: ScheduleInput) -> ScheduleCore:
    state = ScheduleState(
        schedule=None if current is None else StoredSchedule.model_validate(dict(current)),
        paused=paused,
        remaining_runs=settings.remaining_runs,
    )
    return ScheduleCore(state, schedule_reading(settings), settings)
