"""The budget of state a workflow carries across continue-as-new (pure, shared by both cores).

Temporal refuses payloads over 2 MB, and its SDKs warn above 512 KiB. A schedule's or a
ledger's carried state stays under this budget, so its continue-as-new input never draws
the warning and is nowhere near the limit: whatever would pass it is refused, or (a tick)
skipped, before it is recorded.
"""

STATE_BUDGET_BYTES = 448 * 1024
