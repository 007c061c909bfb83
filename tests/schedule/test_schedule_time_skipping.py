"""Long spans on the time-skipping test server: an hourly CRON_TZ schedule across a week with
a daylight-saving change. (A worker outage is tested on the dev server: the time-skipping
server does not advance time while a workflow task waits for a missing worker.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from temporalio.testing import WorkflowEnvironment

from tests.support.fakes import ScheduleFake
from tests.support.helpers import eventually, schedule_worker

NEW_YORK = ZoneInfo("America/New_York")
HOUR_MS = 3_600_000


async def skip_to(env: WorkflowEnvironment, moment: datetime) -> None:
    now = await env.get_current_time()
    if moment > now:
        await env.sleep(moment - now)


async def test_hourly_cron_tz_across_a_week_with_a_spring_forward(
    time_skipping_env: WorkflowEnvironment, task_queue: str, unique: str
) -> None:
    env = time_skipping_env
    # The week around the next US spring-forward after the server's clock.
    now = await env.get_current_time()
    year = now.year + 1
    march = [datetime(year, 3, day, tzinfo=NEW_YORK) for day in range(8, 15)]
    change = next(d for d in march if d.weekday() == 6)  # second Sunday of March
    start = (change - timedelta(days=3)).astimezone(UTC)
    await skip_to(env, start)
    recorder = ScheduleFake()
    async with schedule_worker(env.client, task_queue, recorder.activities()):
        hourly = await env.client.start_workflow(
            "DurabilitySchedule",
            # The time-skipping server stops skipping time after this workflow continues as
            # new (seen at the default 2,000-event threshold); continue-as-new is tested on
            # the dev server, so keep this week in one execution (~3,900 events).
            {"continue_as_new_after_events": 10_000},
            id=f"schedule:h-{unique}",
            task_queue=task_queue,
        )
        await hourly.execute_update(
            "set", {"expression": "CRON_TZ=America/New_York 0 * * * *", "version": 1}
        )
        for _ in range(7 * 24):  # hour by hour: one long sleep outlasts the RPC timeout
            await env.sleep(timedelta(hours=1))
        await eventually(lambda: len(recorder.outcomes) == len(recorder.started), timeout=60)
        await hourly.execute_update("cancel", {})

    hourly_times = sorted(
        r["scheduled_time"] for r in recorder.started if r["object_id"] == f"h-{unique}"
    )
    first = hourly_times[0]
    assert len(hourly_times) == len(set(hourly_times))
    # every real hour of the week once: no run lost or doubled by the 23-hour day
    assert hourly_times == [first + i * HOUR_MS for i in range(len(hourly_times))]
    assert len(hourly_times) >= 24 * 7 - 1
    local = [datetime.fromtimestamp(t / 1000, NEW_YORK) for t in hourly_times]
    assert all(moment.minute == 0 for moment in local)
    on_change_day = [m for m in local if m.date() == change.date()]
    assert [m.hour for m in on_change_day] == [0, 1, *range(3, 24)]
    assert {m.utcoffset() for m in local} == {timedelta(hours=-5), timedelta(hours=-4)}

    assert {run["scheduled_time"] for run, _, _ in recorder.outcomes} == {
        r["scheduled_time"] for r in recorder.started
    }
