"""What a schedule publishes outside its history: search attributes, its state memo and the
UI's details.

Each upsert is a billed action and a visibility write, so only what changed is sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from temporalio import workflow

from workflows import search_attributes
from workflows.schedule import status
from workflows.schedule.models import ScheduleState
from workflows.schedule.patches import STATE_MEMO_PATCH


class Published:
    """The values this run of the schedule last upserted."""

    def __init__(self, object_id: str) -> None:
        self._object_id = object_id
        self._values: dict[str, int | None] = {}
        # The state last published (None until read from this run's memo), and whether this
        # run publishes it at all (the patch, asked once: None until then).
        self._state: str | None = None
        self._publishes_state: bool | None = None

    def publish(
        self, state: ScheduleState, wake_at: int | None, next_times: Sequence[int] = ()
    ) -> None:
        """Upsert the search attributes that changed, and set the UI's current details (with
        `next_times`, the next fire times)."""
        updates: list[Any] = []
        first = "next_tick_at" not in self._values  # this run's first workflow task
        if first:
            updates.append(search_attributes.OBJECT_ID.value_set(self._object_id))
        if first or status.next_tick_stale(self._values["next_tick_at"], wake_at):
            updates.append(
                search_attributes.NEXT_TICK_AT.value_unset()
                if wake_at is None
                else search_attributes.NEXT_TICK_AT.value_set(
                    datetime.fromtimestamp(wake_at / 1000, tz=UTC)
                )
            )
            self._values["next_tick_at"] = wake_at
        stored = state.schedule
        if stored is not None and stored.version != self._values.get("version"):
            updates.append(search_attributes.SCHEDULE_VERSION.value_set(stored.version))
            self._values["version"] = stored.version
        if updates:
            workflow.upsert_search_attributes(updates)
        self._publish_state(status.lifecycle_state(state))
        workflow.set_current_details(status.details(state, wake_at, next_times))

    def publish_closing(self) -> None:
        """The schedule closes as cancelled: `durability schedule list` shows `closing` (it
        refuses every message meanwhile) until it closes."""
        self._publish_state(status.CLOSING_STATE)

    def _publish_state(self, current: str) -> None:
        """Upsert the state memo when it changed (a continue-as-new carries the memo over)."""
        if self._state is None:
            carried = workflow.memo_value(search_attributes.SCHEDULE_STATE_MEMO_KEY, None)
            self._state = carried.get("state") if isinstance(carried, dict) else ""
        if current == self._state:
            return
        if self._publishes_state is None:
            self._publishes_state = workflow.patched(STATE_MEMO_PATCH)
        if self._publishes_state:
            workflow.upsert_memo({search_attributes.SCHEDULE_STATE_MEMO_KEY: {"state": current}})
            self._state = current
