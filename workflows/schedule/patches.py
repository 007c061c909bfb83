"""Every patch of the schedule capability (pure), each with what it changes: a workflow asks
`workflow.patched(name)` where the change begins, so a history recorded without the marker
replays as it ran. docs/compat.md lists what each replays and when it can go.
"""

# --- `DurabilitySchedule`

# The start fields bounding a schedule's life (`catchup_window_ms`, `start_at`, `end_at`,
# `remaining_runs`, `pause_on_failure`) apply; without the marker they are ignored.
SCHEDULE_BOUNDS_PATCH = "schedule-bounds"
# A cancellation request closes the schedule only once every run it started has reported.
CLOSE_AFTER_RUNS_ON_CANCEL_PATCH = "close-after-runs-on-cancel"
# A cancellation lifts a continue-as-new's stop of deliveries: the outcomes owed are delivered.
DELIVER_WHILE_CANCELLING_PATCH = "deliver-while-cancelling"
# A cancellation request publishes the state memo `closing`.
PUBLISH_CLOSING_PATCH = "publish-closing-state"
# A signal to a schedule closing as cancelled is dropped and counted, not lost with the close.
DROP_WHILE_CLOSING_PATCH = "drop-signals-while-closing"
# A `trigger` on a time already held records its own run at the next free millisecond.
DISTINCT_TRIGGER_TIMES_PATCH = "distinct-trigger-times"
# The schedule publishes its state memo.
STATE_MEMO_PATCH = "schedule-state-memo"
# The schedule, not the run's child, delivers the outcome of a run it starts.
SCHEDULE_DELIVERS_PATCH = "schedule-delivers-outcomes"
# A run of the schedule starts again the redeliveries its predecessor left going.
RESUME_REDELIVERIES_PATCH = "resume-carried-redeliveries"
# The built-in reading ANDs the day fields as classic cron does (`day_rule`).
CLASSIC_DAY_RULE_PATCH = "cron-classic-day-rule"
# The built-in reading reads the fields as crontab(5) does (`day_rule`).
CRONTAB_READING_PATCH = "cron-crontab-reading"
# A `set` the set rules refuse is refused by its handler too (`set_rules`).
SET_RULES_PATCH = "schedule-set-rules"
# The schedule starts its runs with `run_paths` (`ScheduledRunInput`): a run then records no
# `RUN_PATHS_PATCH` marker, and an external run's timeout is kept by the server (its run
# activity's schedule-to-close timeout) instead of a run timer. Asked by the schedule, once
# per run of its workflow, so that it costs the runs nothing.
RUN_PATHS_FROM_INPUT_PATCH = "run-paths-from-input"

# --- `ScheduledRun`

# A run takes the paths `deliver_by_schedule` and plugin hosting (no run timer, a default
# heartbeat timeout, its timeout in the activity ID) behind one patch, asked in its first
# task: each patch costs every run two history events (its marker and the SDK's
# `TemporalChangeVersion` upsert).
RUN_PATHS_PATCH = "scheduled-run-0.1.1-paths"
