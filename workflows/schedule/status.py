"""What a schedule shows outside its history (pure): the UI's "Current Details" and when
`DurabilityNextTickAt` needs a new value. No Temporal import."""

from __future__ import annotations

from datetime import UTC, datetime

from workflows.schedule.core import ScheduleState

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


def lifecycle_state(state: ScheduleState) -> str:
    """What `durability schedule list` shows for a schedule: `never set`, `cancelled` (a
    tombstone is stored), `paused` (a live schedule that does not tick) or `live`."""
    stored = state.schedule
    if stored is None:
        return "never set"
    if stored.expression is None:
        return "cancelled"
    return "paused" if state.paused else "live"


def details(state: ScheduleState, wake_at: int | None) -> str:
    """Markdown for the UI's "Current Details": the live schedule and its runs."""
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
    return f"{head}  \nRuns awaiting acknowledgement: {counts}"
