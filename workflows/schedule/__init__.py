"""Per-object recurring schedule (rules S1-S14, docs/contract.md): workflow `DurabilitySchedule`,
one `ScheduledRun` child per run. `core` is the pure state machine, `cron` the built-in
`next_occurrence`, `workflow` the Temporal shell."""

SCHEDULE_WORKFLOW_TYPE = "DurabilitySchedule"
RUN_WORKFLOW_TYPE = "ScheduledRun"
