"""Custom search attributes the product sets, so `temporal workflow list --query` finds objects,
and the memo keys it publishes (read back by `durability ... list`).

The run command registers them on the embedded dev server; on a real cluster register them
once with `temporal operator search-attribute create` (docs/operations.md, "2. Register the
search attributes").
"""

from temporalio.common import SearchAttributeKey

OBJECT_ID = SearchAttributeKey.for_keyword("DurabilityObjectId")
LEDGER_ID = SearchAttributeKey.for_keyword("DurabilityLedgerId")
NEXT_TICK_AT = SearchAttributeKey.for_datetime("DurabilityNextTickAt")
SCHEDULE_VERSION = SearchAttributeKey.for_int("DurabilityScheduleVersion")

ALL = (OBJECT_ID, LEDGER_ID, NEXT_TICK_AT, SCHEDULE_VERSION)

# Memo keys (no registration needed). Each workflow's status as of its last progress barrier
# (`workflows.kernel`): a schedule's running/queued runs, a ledger's operations per phase.
STATUS_MEMO_KEY = "durability_status"
# A schedule's state (`workflows.schedule.status.lifecycle_state`), upserted when it changes.
SCHEDULE_STATE_MEMO_KEY = "durability_schedule_state"

CLI_TYPE_NAMES = {"KEYWORD": "Keyword", "DATETIME": "Datetime", "INT": "Int"}


def dev_server_args() -> list[str]:
    """`--search-attribute name=Type` arguments for `temporal server start-dev`."""
    args: list[str] = []
    for key in ALL:
        args += ["--search-attribute", f"{key.name}={CLI_TYPE_NAMES[key.indexed_value_type.name]}"]
    return args
