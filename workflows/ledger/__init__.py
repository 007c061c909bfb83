"""The durable operation ledger (docs/contract.md section 3, rules L1-L14).

`core` is the pure state machine (no Temporal import), `workflow` the thin Temporal shell,
`models` the wire shapes. Constants shared by the shell, the activities and the tests live here.
"""

LEDGER_WORKFLOW = "OperationLedger"
FROZEN_REQUEST_WORKFLOW = "FrozenRequest"
LEDGER_ID_PREFIX = "ledger:"
REQUEST_ID_PREFIX = "request:"


def ledger_workflow_id(ledger_id: str) -> str:
    """`ledger:<ledger_id>`."""
    return f"{LEDGER_ID_PREFIX}{ledger_id}"


def request_workflow_id(ledger_id: str, request_id: str) -> str:
    """`request:<ledger_id>:<request_id>`."""
    return f"{REQUEST_ID_PREFIX}{ledger_id}:{request_id}"
