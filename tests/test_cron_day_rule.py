"""The classic day rule on the dev server, behind the patch `cron-classic-day-rule`.

An expression whose day-of-month or day-of-week field begins with `*` while the other is
restricted fires on days where both match (classic cron); a schedule recorded before the
rule, when it fired where either matched, replays as recorded.

`schedule_parent_0_1_1_day_fields_ored.json` was recorded by the build before the rule with
`python -m tests.test_cron_day_rule` (starts its own dev server): a schedule on such an
expression that fired on a day where only one day field matched.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from temporalio.client import Client, WorkflowHistory

from tests.helpers import OutcomeReceiver, schedule_worker, start_dev_server

HISTORIES = Path(__file__).parent / "histories"
ORED_HISTORY = HISTORIES / "schedule_parent_0_1_1_day_fields_ored.json"


def cron_weekday(day: datetime) -> int:
    """Cron's day of the week: 0 is Sunday."""
    return (day.weekday() + 1) % 7


def one_day_field_matches(day: datetime) -> str:
    """A 6-field expression firing every 2 seconds of a day where exactly one of its two
    (restricted) day fields matches `day`, and one of them begins with `*`: it fires on `day`
    under the rule "either matches" and not under the classic rule "both match"."""
    if day.day == 1:  # every `*/n` day of the month holds the 1st
        return f"*/2 * * */2 * {(cron_weekday(day) + 1) % 7}"
    step = next(n for n in range(2, 8) if (day.day - 1) % n)
    return f"*/2 * * */{step} * {cron_weekday(day)}"


async def wait_for_a_safe_day() -> datetime:
    """Now, or just after midnight UTC when the day ends within a minute."""
    now = datetime.now(UTC)
    midnight = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    if midnight - now < timedelta(minutes=1):
        await asyncio.sleep((midnight - now).total_seconds() + 1)
        now = datetime.now(UTC)
    return now


async def record_ored_schedule(client: Client) -> WorkflowHistory:
    """A schedule on `one_day_field_matches(today)` that fires twice today, then cancelled."""
    today = await wait_for_a_safe_day()
    receiver = OutcomeReceiver()
    receiver.refusing = False
    task_queue = f"record-{uuid.uuid4().hex[:8]}"
    async with schedule_worker(client, task_queue, receiver.activities()):
        handle = await client.start_workflow(
            "DurabilitySchedule",
            {},
            id=f"schedule:day-fields-ored-{uuid.uuid4().hex[:6]}",
            task_queue=task_queue,
        )
        await handle.execute_update(
            "set", {"expression": one_day_field_matches(today), "version": 1}
        )
        deadline = time.monotonic() + 30
        while len(receiver.calls) < 2 or await handle.query("runs"):
            assert time.monotonic() < deadline, "the schedule did not fire twice"
            await asyncio.sleep(0.2)
        await handle.execute_update("cancel", {})
        return await handle.fetch_history()


async def _main() -> None:
    env = await start_dev_server()
    try:
        history = await record_ored_schedule(env.client)
    finally:
        await env.shutdown()
    recorded = {"workflow_id": history.workflow_id, "history": json.loads(history.to_json())}
    ORED_HISTORY.write_text(json.dumps(recorded, indent=1))
    print(f"recorded {len(history.events)} schedule events in {ORED_HISTORY.name}")


if __name__ == "__main__":
    sys.exit(asyncio.run(_main()))
