"""Workflow definitions: each capability is a pure core (`core.py`) and a thin Temporal shell.

The four product workflows run outside the Python SDK's sandbox (`sandboxed=False`). Profiles
of the benchmark put 36% of the worker's CPU in the sandbox (entering it for every payload's
serialization context and every activation). What the sandbox would guard against is guarded
here instead: the decisions live in pure cores with no clock, randomness or I/O of their own
(time and randomness come from `workflow.now()` / `workflow.random()`), no module state can
change a decision (the cron module's zone cache only memoizes), and recorded histories are
replayed in the tests (S14). A user's subclass declares its own `@workflow.defn` and is
sandboxed unless it opts out the same way.
"""

# Passed to `@workflow.defn(sandboxed=...)` on every product workflow.
SANDBOXED = False
