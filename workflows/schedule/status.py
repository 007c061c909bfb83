"""What a schedule shows outside its history (pure): the UI's "Current Details" and when
`DurabilityNextTickAt` needs a new value. No Temporal import."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from workflows.schedule.models import RecentRun, ScheduleState

# `DurabilityNextTickAt` is refreshed when the next tick moves earlier, or later by more than
# this: each upsert is a billed action and a visibility write, so not on every tick.
NEXT_TICK_PUBLISH_SLACK_MS = 60_000


def iso(ms: int) -> str:
    """Epoch milliseconds as an ISO 8601 UTC time."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def next_tick_stale(published: int | None, wake_at: int | None) -> bool:
    """Whether the published next tick must change to `wake_at`: set/unset, moved earlier, or
    moved later by more than the slack. So the published value is never later than the real
    next tick, and at most a minute earlier."""
    if wake_at == published:
        return False
    if wake_at is None or published is None or wake_at < published:
        return True
    return wake_at - published > NEXT_TICK_PUBLISH_SLACK_MS


# The state memo of a schedule closing as cancelled (`Published.publish_closing`).
CLOSING_STATE = "closing"


def lifecycle_state(state: ScheduleState) -> str:
    """What `durability schedule list` shows for a schedule: `never set`, `cancelled` (a
    tombstone is stored), `paused` (a live schedule that does not tick) or `live`."""
    stored = state.schedule
    if stored is None:
        return "never set"
    if stored.expression is None:
        return "cancelled"
    return "paused" if state.paused else "live"


# How many of the last ended runs and of the next fire times the details show (each line is
# short, so the details stay well under a kilobyte).
DETAILS_RUNS = 5
DETAILS_NEXT_TIMES = 5


def _ended_line(run: RecentRun) -> str:
    outcome = run.outcome
    if outcome is None:
        shown = "ended (outcome not reported)"
    elif outcome.error is not None:
        shown = f"errored ({outcome.error.name})"
    else:
        shown = outcome.status
    return f"- {iso(run.scheduled_time)}: {shown}, {run.delivery.value.replace('_', ' ')}"


def details(state: ScheduleState, wake_at: int | None, next_times: Sequence[int] = ()) -> str:
    """Markdown for the UI's "Current Details": the live schedule, its runs, the last runs
    that ended and the next fire times (`next_times`, as `ScheduleCore.next_fire_times`)."""
    stored = state.schedule
    if stored is None or stored.expression is None:
        head = "No live schedule (never set, or cancelled)."
    else:
        head = (
            f"`{stored.expression}` version {stored.version}, jitter {stored.jitter_ms} ms  \n"
            f"Next tick: {'none' if wake_at is None else iso(wake_at)}"
        )
    if state.paused:
        note = "" if state.pause_note is None else f" {state.pause_note}"
        head = f"**Paused.**{note}  \n{head}" if note else f"**Paused.** {head}"
    states = [run.state.value for run in state.runs.values()]
    counts = ", ".join(f"{states.count(s)} {s}" for s in sorted(set(states))) or "none"
    text = f"{head}  \nRuns awaiting acknowledgement: {counts}"
    recent = state.recent_runs[::-1][:DETAILS_RUNS]
    if recent:
        text += "\n\nLast runs (newest first):\n\n" + "\n".join(_ended_line(r) for r in recent)
    upcoming = list(next_times)[:DETAILS_NEXT_TIMES]
    if upcoming:
        text += "\n\nNext fire times: " + ", ".join(iso(t) for t in upcoming)
    return text
