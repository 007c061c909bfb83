"""durability: per-object schedules and an operation ledger on Temporal."""

DEFAULT_TASK_QUEUE = "durability"
TASK_QUEUE_ENV = "DURABILITY_TASK_QUEUE"
