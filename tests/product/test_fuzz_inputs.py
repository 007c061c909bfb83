"""Fuzzing the four workflows' messages and start inputs on the real dev server.

Every message of `DurabilitySchedule` and `OperationLedger`, their start inputs, and the start
inputs of `ScheduledRun` / `FrozenRequest` started by hand, go through a real client to a real
worker. The inputs are JSON shapes drawn by hypothesis: a valid payload with one field
mutated (a wrong type, null, dropped, an unknown field added), or the whole payload replaced by
any JSON value. Values include numbers out of range (negative, past 2**63 and 2**64, floats;
NaN and infinity are not JSON), strings up to ~1 MB, values nested 50-200 deep, unicode with
astral, right-to-left and zero-width characters in IDs and strings, empty strings and null.
What must hold:

- an update is applied, or refused with a non-retryable `ApplicationError` of a public
  rejection type whose message names the field (or, for a refusal that depends on the state,
  says which);
- the same payload as a signal breaks nothing: when the update was refused, the signal is
  dropped and counted in `dropped_signals`;
- a start input runs, or fails the workflow once (`InvalidStartInput`, for the parents and
  the children alike) naming the
  field; a start input that runs is driven until its first child and activity are scheduled,
  so the names it sets (IDs, activity names, task queues, retry policies) reach Temporal;
- after every example the workflow answers all its queries and no workflow task of it is
  failing; at the end no history has a WORKFLOW_TASK_FAILED event and every history replays.

How hypothesis meets pytest-asyncio: `@given` turns a *synchronous* function into a loop over
examples, while these tests are coroutines on the session's event loop, which also runs the
client and the worker. Running that loop from inside a sync `@given` test (re-entering the
session loop, or a second loop per example) fights pytest-asyncio. So each test first draws a
fixed list of inputs with `draw()` (a `@given` function that only collects what it is given:
generate phase only, no shrinking, no example database), then sends them from the async test,
many to one workflow. A failure shows the input (shortened) and the seed; `FUZZ_SEED=<seed>`
draws the same inputs again.

JSON nested deeper than the SDK's converter reads (200 levels) or otherwise unreadable
(`test_unreadable_payloads...`) is refused by the SDK before any handler sees it: that test
checks only that nothing breaks, so the message fuzz keeps values under 190 levels.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from tests.support.cold_worker import assert_healthy, events_of, kind
from tests.support.helpers import eventually, running_worker
from workflows.limits import MAX_MESSAGE_BYTES, id_form_problem
from workflows.schedule.models import MAX_LIFE_BOUND_MS

SEED = int(os.environ.get("FUZZ_SEED", random.randrange(2**32)))
QUERY_TIMEOUT = timedelta(seconds=15)
SHOWN = 300  # characters of an input shown in a failure


def draw(strategy: st.SearchStrategy[Any], count: int, salt: int) -> list[Any]:
    """`count` examples of `strategy` (see the module docstring)."""
    found: list[Any] = []

    @seed(SEED + salt)
    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(value: Any) -> None:
        found.append(value)

    collect()
    return found


def shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN else f"{text[:SHOWN]}... ({len(text)} characters)"


def context(what: str, value: Any) -> str:
    return f"{what} {shown(value)} (FUZZ_SEED={SEED})"


# ------------------------------------------------------------------ strategies

SPECIAL_TEXT = [
    "",
    " ",
    "\u200b",  # zero-width space
    "a\u200d\u200cb",  # zero-width joiner, non-joiner
    "\u202eevil\u202c",  # right-to-left override
    "\u200f",  # right-to-left mark
    "עברית",
    "مرحبا",
    "\ufeff",
    "\x00",
    "e\u0301",
    "😀",
    "\U0001d518\U0001d52b\U0001d526",  # astral (Fraktur "Uni")
    "\U0010fffd",
    "\n\t",
    "'\"\\",
    "null",
    "0",
]
# Any UTF-8 encodable character: no lone surrogates (not valid JSON text for the SDKs).
small_text = st.one_of(
    st.text(st.characters(codec="utf-8"), max_size=24), st.sampled_from(SPECIAL_TEXT)
)
names = st.one_of(
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=24),
    st.sampled_from([t for t in SPECIAL_TEXT if t]),
)


def _repeat(unit: str, size: int) -> str:
    return unit * max(1, size // len(unit.encode()))


# Up to ~1 MB as UTF-8: under Temporal's 2 MB payload limit.
big_text = st.builds(
    _repeat,
    st.sampled_from(["x", "é", "😀", "\u202e", "a\u200bb"]),
    st.sampled_from([101, 501, 1_025, 20_000, 300_000, 1_000_000]),
)
EDGE_INTS = [0, -1, 1, 2**31 - 1, 2**31, 2**53 - 1, 2**53, 2**63 - 1, 2**63, 2**64, -(2**63) - 1]
numbers = st.one_of(
    st.integers(),
    st.integers(-(2**80), 2**80),
    st.sampled_from([*EDGE_INTS, 10**30, -(10**30)]),
    st.floats(allow_nan=False, allow_infinity=False),
)
leaf = st.one_of(st.none(), st.booleans(), numbers, small_text)
json_value = st.recursive(
    leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(small_text, inner, max_size=3),
    max_leaves=10,
)


def _nest(value: Any, depth: int, as_object: bool) -> Any:
    for _ in range(depth):
        value = {"k": value} if as_object else [value]
    return value


def deep(max_depth: int) -> st.SearchStrategy[Any]:
    return st.builds(_nest, leaf, st.integers(50, max_depth), st.booleans())


def any_value(max_depth: int) -> st.SearchStrategy[Any]:
    """Any JSON value; nested values go up to `max_depth` levels."""
    return st.one_of(
        leaf,
        json_value,
        deep(max_depth),
        big_text,
        st.sampled_from([None, {}, [], "", 0, -1, 2**64, 1.5]),
    )


def mutated(
    valid: st.SearchStrategy[dict[str, Any]],
    whole: str,
    max_depth: int,
    extra_refused: bool = True,
    fields: dict[str, st.SearchStrategy[Any]] | None = None,
) -> st.SearchStrategy[tuple[Any, str]]:
    """`(payload, name)`: a valid payload with one change, and the name a refusal must show:
    the field changed, or `whole` when the whole payload was replaced. An unknown field is
    named by its key when `extra_refused`. `fields` adds field-specific values to try."""

    @st.composite
    def build(draw_: st.DrawFn) -> tuple[Any, str]:
        payload = dict(draw_(valid))
        change = draw_(st.sampled_from(["keep", "replace", "replace", "drop", "extra", "whole"]))
        if change == "whole":
            return draw_(any_value(max_depth)), whole
        if change == "extra":
            key = draw_(names.filter(lambda k: k not in payload))
            payload[key] = draw_(any_value(max_depth))
            return payload, key if extra_refused else whole
        if change == "keep" or not payload:
            return payload, whole
        field = draw_(st.sampled_from(sorted(payload)))
        if change == "drop":
            del payload[field]
        else:
            values = any_value(max_depth)
            if fields and field in fields:
                values = st.one_of(values, fields[field])
            payload[field] = draw_(values)
        return payload, field

    return build()


# The message fuzz keeps every message under the converter's 200 levels (module docstring).
MESSAGE_DEPTH = 190

VALID_EXPRESSIONS = [
    "@every 1h",
    "@every 90m",
    "*/30 * * * *",
    "CRON_TZ=Europe/Paris 0 9 * * 1-5",
    "@daily",
]
# A jitter below every valid expression's interval (`*/30` fires every 30 minutes): a set
# whose jitter is at least its interval is refused naming `jitter_ms`.
VALID_JITTER_MS = 30 * 60 * 1000 - 1
EXPRESSION_TOKENS = [
    *["*", "*/5", "*/0", "0", "59", "60", "1-5", "5-1", "MON", "JAN-DEC", "L", "1W", "5#6", "?"],
    *[",", "-", "/", "@every", "@daily", "@hourly", "@yearly", "@bogus", "@every 0s"],
    *["1h", "0s", "500ms", "1h30m", "-1s", "\u0661\u0662s", "99999999999999h", "9" * 30 + "s"],
    *["CRON_TZ=America", "CRON_TZ=Europe/Paris", "CRON_TZ=Nowhere/Land", "CRON_TZ=/etc/passwd"],
    *["CRON_TZ=..", "CRON_TZ=", "\u200b", "😀", "\x00"],
]
expressions = st.one_of(
    st.sampled_from(VALID_EXPRESSIONS),
    st.just("0 0 30 2 *"),  # never fires: no next occurrence
    st.lists(st.sampled_from(EXPRESSION_TOKENS), min_size=1, max_size=7).map(" ".join),
    small_text,
)
set_payloads = mutated(
    st.fixed_dictionaries(
        {"expression": st.sampled_from(VALID_EXPRESSIONS), "version": st.integers(0, 2**53 - 1)},
        optional={
            "jitter_ms": st.one_of(
                st.integers(0, VALID_JITTER_MS),
                st.fixed_dictionaries({"max_ms": st.integers(0, VALID_JITTER_MS)}),
            ),
            "params": st.dictionaries(small_text, json_value, max_size=4),
        },
    ),
    "set",
    MESSAGE_DEPTH,
    fields={
        "expression": expressions,
        "jitter_ms": st.one_of(
            st.integers(0, 2**31 - 1),
            st.fixed_dictionaries({"max_ms": st.integers(0, 2**31 - 1)}),
        ),
    },
)
cancel_payloads = mutated(
    st.fixed_dictionaries({}, optional={"version": st.integers(0, 2**53 - 1)}),
    "cancel",
    MESSAGE_DEPTH,
)


def backfill_payloads(now_ms: int) -> st.SearchStrategy[tuple[Any, str]]:
    hour = 3_600_000
    return mutated(
        st.fixed_dictionaries(
            {
                "start_at": st.integers(now_ms - 6 * hour, now_ms - 2 * hour),
                "end_at": st.integers(now_ms - 2 * hour, now_ms - 1000),
            }
        ),
        "backfill",
        MESSAGE_DEPTH,
    )


ignored_payloads: st.SearchStrategy[Any] = st.one_of(any_value(MESSAGE_DEPTH), st.just({}))


def schedule_start_inputs(max_depth: int) -> st.SearchStrategy[tuple[Any, str]]:
    interval = st.integers(1, 2**31 - 1)
    retries = st.fixed_dictionaries(
        {},
        optional={
            "max_attempts": st.integers(1, 2**31 - 1),
            "initial_interval_ms": st.integers(1, 1000),
            "backoff_coefficient": st.floats(1.0, 1e300),
            "maximum_interval_ms": st.integers(1000, 2**31 - 1),
        },
    )
    valid = st.fixed_dictionaries(
        {},
        optional={
            "object_id": small_text,
            "max_concurrent_runs": st.integers(1, 1000),
            "max_queued_runs": st.integers(0, 1000),
            "overlap": st.sampled_from(["queue", "skip", "buffer_one"]),
            "run_timeout_ms": interval,
            "run_heartbeat_timeout_ms": st.none() | interval,
            "outcome_timeout_ms": interval,
            "outcome_retries": retries,
            "run_activity": st.just("run") | names,
            "outcome_activity": st.just("on_outcome") | names,
            "lifecycle_activity": st.sampled_from([None, "lifecycle"]) | names,
            "activity_task_queue": st.none() | names,
            "run_host": st.sampled_from(["plugin", "external"]),
            # The bounds (2.1): a start_at below any end_at drawn, so both may be set.
            "catchup_window_ms": st.none() | interval,
            "start_at": st.none() | st.integers(0, MAX_LIFE_BOUND_MS // 2),
            "end_at": st.none() | st.integers(MAX_LIFE_BOUND_MS // 2 + 1, MAX_LIFE_BOUND_MS),
            "remaining_runs": st.none() | st.integers(0, 10**9),
            "pause_on_failure": st.booleans(),
        },
    )
    # Unknown start fields are ignored (contract 2.1).
    return mutated(
        valid,
        "DurabilitySchedule input",
        max_depth,
        extra_refused=False,
        fields={"outcome_retries": mutated(retries, "", max_depth).map(lambda p: p[0])},
    )


def ledger_start_inputs(max_depth: int) -> st.SearchStrategy[tuple[Any, str]]:
    retry = st.fixed_dictionaries(
        {},
        optional={
            "initial_interval_ms": st.integers(1, 2**31 - 1),
            "backoff_coefficient": st.floats(1.0, 1e300),
            "maximum_interval_ms": st.integers(1, 2**31 - 1),
        },
    )
    retention = st.fixed_dictionaries(
        {},
        optional={
            "resolved_operations": st.integers(0, 1000),
            "remembered_ids": st.integers(0, 5000),
        },
    )
    valid = st.fixed_dictionaries(
        {},
        optional={
            "ledger_id": small_text,
            "concurrency": st.integers(1, 1000),
            "lanes": st.dictionaries(small_text, st.integers(1, 10), max_size=3),
            "participant_free_types": st.lists(small_text, max_size=3),
            "supported_protocol_versions": st.lists(st.integers(), max_size=3),
            "retry": retry,
            "compile_activity": st.just("compile") | names,
            "submit_activity": st.just("submit") | names,
            "query_activity": st.just("query") | names,
            "complete_activity": st.none() | names,
            "activity_task_queue": st.none() | names,
            "retention": retention,
        },
    )
    nested = {
        "retry": mutated(retry, "", max_depth).map(lambda p: p[0]),
        "retention": mutated(retention, "", max_depth).map(lambda p: p[0]),
    }
    return mutated(valid, "OperationLedger input", max_depth, fields=nested)


OP_IDS = ["op-a", "op-b", "\u202eop", "\U0001d52c\U0001d52d", "op\u200b", "x" * 100]
canvases = st.sampled_from(["c1", "c2", "\u200f", "\U0001d520"]) | names
intent_fields = {
    "dependencies": st.lists(st.sampled_from(OP_IDS), max_size=2),
    "payload": json_value,
    "protocol_version": st.sampled_from([1, 1, 2, 0, -1, 2**64]),
}
# A valid intent of a type that is not participant-free names its participants (an empty
# list is refused naming them); `asset.upload` may name none.
intents = st.fixed_dictionaries(
    {
        "id": st.sampled_from(OP_IDS) | names,
        "operation_type": st.just("t"),
        "participants": st.lists(canvases, min_size=1, max_size=3),
    },
    optional=intent_fields,
) | st.fixed_dictionaries(
    {"id": st.sampled_from(OP_IDS) | names, "operation_type": st.just("asset.upload")},
    optional={"participants": st.lists(canvases, max_size=3), **intent_fields},
)


@st.composite
def enqueue_payloads(draw_: st.DrawFn) -> tuple[Any, str]:
    operations: list[Any] = draw_(st.lists(intents, min_size=1, max_size=3))
    name = "enqueue"
    if draw_(st.booleans()):
        index = draw_(st.integers(0, len(operations) - 1))
        operations[index], field = draw_(mutated(st.just(operations[index]), "", MESSAGE_DEPTH))
        name = f"operations.{index}" + (f".{field}" if field else "")
    payload, top = draw_(mutated(st.just({"operations": operations}), "enqueue", MESSAGE_DEPTH))
    kept = top == "enqueue" and isinstance(payload, dict) and "operations" in payload
    return payload, (name if kept else top)


# ------------------------------------------------------------------ checks


def names_it(message: str, name: str) -> bool:
    """Whether a refusal's message shows `name` (as is, or escaped as repr shows it)."""
    return any(form[:60] in message for form in (name, repr(name)[1:-1]) if form)


async def failing_task(handle: WorkflowHandle[Any, Any]) -> str | None:
    """The message of the workflow's latest failed workflow task, if one is failing now."""
    description = await handle.describe()
    raw = description.raw_description
    if not raw.HasField("pending_workflow_task") or raw.pending_workflow_task.attempt <= 1:
        return None
    failures = [e for e in await events_of(handle) if kind(e) == "WORKFLOW_TASK_FAILED"]
    return failures[-1].workflow_task_failed_event_attributes.failure.message if failures else "?"


async def answers(
    handle: WorkflowHandle[Any, Any], queries: Sequence[str], what: str, value: Any
) -> list[Any]:
    """Every query answers and no workflow task is failing; returns the answers."""
    try:
        # One after the other: concurrent queries to one workflow are ~20x slower.
        results = [await handle.query(name, rpc_timeout=QUERY_TIMEOUT) for name in queries]
    except Exception as error:
        failing = await failing_task(handle)
        raise AssertionError(
            f"queries broke after {context(what, value)}: {error!r}; failing task: {failing}"
        ) from error
    failing = await failing_task(handle)
    assert failing is None, f"workflow task failing after {context(what, value)}: {failing}"
    return results


async def update(
    handle: WorkflowHandle[Any, Any],
    message: str,
    payload: Any,
    name: str,
    types: set[str],
    state_refusals: Sequence[str] = (),
) -> bool:
    """Send `payload` as the update `message`; True if applied, False if refused as the
    contract says (non-retryable, a public type, naming `name` or a state refusal)."""
    what = f"update {message}"
    try:
        await handle.execute_update(message, payload, rpc_timeout=QUERY_TIMEOUT)
        return True
    except WorkflowUpdateFailedError as error:
        cause = error.cause
    except Exception as error:
        failing = await failing_task(handle)
        raise AssertionError(
            f"{context(what, payload)} broke: {error!r}; failing task: {failing}"
        ) from error
    assert isinstance(cause, ApplicationError), f"{context(what, payload)}: {cause!r}"
    assert cause.non_retryable, f"{context(what, payload)} refused as retryable: {cause}"
    assert cause.type in types, f"{context(what, payload)} refused as {cause.type}: {cause}"
    message_text = str(cause.message)
    # A payload over the workflows' envelope (MAX_MESSAGE_BYTES) is refused whole, naming it.
    envelope = f"{message} update payload is"
    assert (
        names_it(message_text, name)
        or any(s in message_text for s in state_refusals)
        or message_text.startswith(envelope)
    ), f"{context(what, payload)}: the refusal does not name {name!r}: {message_text[:SHOWN]}"
    return False


async def signal_after(
    handle: WorkflowHandle[Any, Any],
    message: str,
    payload: Any,
    refused: bool,
    dropped: Callable[[], Coroutine[Any, Any, int]],
) -> None:
    """Send the payload as a signal: dropped and counted when the update refused it."""
    before = await dropped()
    await handle.signal(message, payload)
    if refused:
        try:
            await eventually(lambda: _grew(dropped, before), timeout=10)
        except AssertionError as error:
            failing = await failing_task(handle)
            raise AssertionError(
                f"{context(f'signal {message}', payload)} was not dropped and counted "
                f"(failing task: {failing})"
            ) from error


async def _grew(dropped: Callable[[], Coroutine[Any, Any, int]], before: int) -> bool:
    return await dropped() == before + 1


async def no_failed_tasks(client: Client, handle: WorkflowHandle[Any, Any]) -> None:
    """Every run of the workflow: no WORKFLOW_TASK_FAILED, and the history replays."""
    runs = {handle.first_execution_run_id or handle.result_run_id}
    description = await handle.describe()
    runs.add(description.run_id)
    for run_id in runs:
        await assert_healthy(client, client.get_workflow_handle(handle.id, run_id=run_id))


def failed_tasks(events: list[HistoryEvent]) -> list[str]:
    return [
        e.workflow_task_failed_event_attributes.failure.message[:SHOWN]
        for e in events
        if kind(e) == "WORKFLOW_TASK_FAILED"
    ]


async def first_events(
    handle: WorkflowHandle[Any, Any], wanted: set[str], timeout: float
) -> list[HistoryEvent]:
    """The history once it holds one of `wanted`, a failed workflow task or the close (or
    after `timeout`)."""
    deadline = asyncio.get_running_loop().time() + timeout
    stop = {*wanted, "WORKFLOW_TASK_FAILED", "WORKFLOW_EXECUTION_FAILED"}
    stop |= {"WORKFLOW_EXECUTION_COMPLETED", "WORKFLOW_EXECUTION_TERMINATED"}
    while True:
        events = await events_of(handle)
        if {kind(e) for e in events} & stop or asyncio.get_running_loop().time() > deadline:
            return events
        await asyncio.sleep(0.1)


async def started_or_failed(
    handle: WorkflowHandle[Any, Any], input: Any, error_type: str, name: str
) -> bool:
    """After a start: True if running; False if it failed once as the contract says."""
    events = await first_events(handle, {"WORKFLOW_TASK_COMPLETED"}, timeout=20)
    problems = failed_tasks(events)
    assert problems == [], f"{context('start input', input)}: failed workflow tasks {problems}"
    if not any(kind(e) == "WORKFLOW_EXECUTION_FAILED" for e in events):
        assert any(kind(e) == "WORKFLOW_TASK_COMPLETED" for e in events), context("hung", input)
        return True
    with pytest.raises(WorkflowFailureError) as failure:
        await handle.result()
    cause = failure.value.cause
    assert isinstance(cause, ApplicationError), f"{context('start input', input)}: {cause!r}"
    assert cause.type == error_type and cause.non_retryable, f"{context('start', input)}: {cause}"
    assert (
        names_it(cause.message, name)
        or "cannot be decoded" in cause.message
        or names_a_bad_id(input, cause.message)
    ), f"{context('start input', input)}: the failure does not name {name!r}: {cause.message}"
    return False


def over_envelope(payload: Any) -> bool:
    """Whether `payload` passes the workflows' envelope on any message (MAX_MESSAGE_BYTES)."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return len(text.encode("utf-8", "surrogatepass")) > MAX_MESSAGE_BYTES - 1024


def names_a_bad_id(input: Any, message: str) -> bool:
    """Whether `message` refuses the input's object or ledger ID, which the drawn base input
    may hold with characters an ID cannot have (blank, spaces around it, control)."""
    return isinstance(input, dict) and any(
        isinstance(input.get(field), str)
        and id_form_problem(field, input[field]) is not None
        and field in message
        for field in ("object_id", "ledger_id")
    )


async def child_id(handle: WorkflowHandle[Any, Any], input: Any, timeout: float = 10) -> str | None:
    """The workflow ID of the first child the workflow started (None if none in `timeout`)."""
    events = await first_events(handle, {"CHILD_WORKFLOW_EXECUTION_STARTED"}, timeout)
    problems = failed_tasks(events)
    assert problems == [], f"{context('start input', input)}: failed workflow tasks {problems}"
    for event in events:
        if kind(event) == "CHILD_WORKFLOW_EXECUTION_STARTED":
            attributes = event.child_workflow_execution_started_event_attributes
            return str(attributes.workflow_execution.workflow_id)
    return None


async def child_schedules_its_activity(client: Client, workflow_id: str, input: Any) -> None:
    child = client.get_workflow_handle(workflow_id)
    events = await first_events(child, {"ACTIVITY_TASK_SCHEDULED"}, timeout=10)
    problems = failed_tasks(events)
    assert problems == [], f"{context('start input', input)}: its child failed tasks {problems}"


def own_id(input: Any, field: str, suffix: str) -> Any:
    """The input with a drawn ID made unique (S1, L1: one workflow per object or ledger; two
    schedules of one object would share their runs' workflow IDs)."""
    if isinstance(input, dict) and isinstance(input.get(field), str) and input[field]:
        return {**input, field: f"{input[field]}~{suffix}"}
    return input


@dataclass(frozen=True)
class Parent:
    """DurabilitySchedule or OperationLedger, as these tests start and query it."""

    workflow: str
    prefix: str  # of its workflow IDs: "<prefix>:<business ID>"
    id_field: str  # the business ID in its start input
    start_error: str  # how it fails on a start input that does not validate
    queries: list[str]


async def start_inputs_run_or_fail_once(
    client: Client,
    task_queue: str,
    unique: str,
    parent: Parent,
    inputs: Sequence[tuple[Any, str, str | None]],
    drive: Callable[[WorkflowHandle[Any, Any], Any], Coroutine[Any, Any, None]],
) -> None:
    """Start `parent` with each (input, the name its failure must show, a workflow ID if not
    the usual one), a drawn ID made unique: it runs, or fails once as the contract says. One
    that runs is driven by `drive(handle, input)`, then answers its queries; no history of
    any has a failed workflow task."""

    async def one(index: int, input: Any, name: str, workflow_id: str | None) -> None:
        input = own_id(input, parent.id_field, f"{index}-{unique}")
        handle = await client.start_workflow(
            parent.workflow,
            input,
            id=workflow_id or f"{parent.prefix}:fz{index}-{unique}",
            task_queue=task_queue,
        )
        if await started_or_failed(handle, input, parent.start_error, name):
            await drive(handle, input)
            await answers(handle, parent.queries, "start input", input)
        await no_failed_tasks(client, handle)

    async with running_worker(client, task_queue):
        await bounded(one, inputs)


async def bounded(
    job: Callable[..., Coroutine[Any, Any, None]], examples: Sequence[tuple[Any, ...]]
) -> None:
    """`job(index, *example)` for every example, 6 at a time; the first failure cancels the
    rest (and is raised in an ExceptionGroup)."""
    gate = asyncio.Semaphore(6)

    async def one(index: int, example: tuple[Any, ...]) -> None:
        async with gate:
            await job(index, *example)

    async with asyncio.TaskGroup() as group:
        for index, example in enumerate(examples):
            group.create_task(one(index, example))


# ------------------------------------------------------------------ schedule

RTL = "\u202e"  # repr shows it as 6 characters: a megabyte of it is a 2 MB message
# Inputs that found bugs, sent on every run: (payload, the name a refusal must show).
PINNED_SETS = [
    ({"expression": "@every 2000000000h", "version": 8}, "expression"),  # a tick past year 9999
    ({"expression": "CRON_TZ=America * * * * *", "version": 8}, "expression"),  # a directory
    ({"expression": "@every 1h", "version": 8, "params": {"k": _nest(0, 100, False)}}, "params"),
    ({"expression": RTL * 333_334, "version": 8}, "expression"),
    ({"expression": "@every 1h", "version": [RTL * 333_334]}, "version"),
]
PINNED_CANCELS = [({"version": RTL * 333_334}, "version"), ({RTL * 333_334: 1}, RTL * 10)]
DEEP_205 = _nest(0, 205, True)
# (input, the name its failure must show, the workflow ID if not the usual one)
PINNED_SCHEDULE_STARTS: list[tuple[Any, str, str | None]] = [
    ({"object_id": "x" * 3000}, "object_id", None),  # its search attribute is over 2 KiB
    ({"object_id": "\U0001f600" * 240}, "object_id", None),  # its runs' IDs over 1000 bytes
    ({}, "object_id", "schedule:" + "y" * 950),  # the same, from the workflow ID
    ({"lifecycle_activity": "l" * 2000}, "lifecycle_activity", None),
    ({"lifecycle_activity": ""}, "lifecycle_activity", None),
    ({"run_activity": "r" * 1001}, "run_activity", None),
    ({"activity_task_queue": "/_sys/x"}, "activity_task_queue", None),
    ({"activity_task_queue": "q" * 2000}, "activity_task_queue", None),
    ({"run_host": "worker"}, "run_host", None),
    ({"outcome_retries": {"max_attempts": 2**40}}, "max_attempts", None),  # an int32
    ({"x": DEEP_205}, "cannot be decoded", None),  # deeper than the converter reads
    ({"start_at": 5, "end_at": 5}, "end_at", None),  # each valid alone
    ({"remaining_runs": 10**9 + 1}, "remaining_runs", None),
]

SCHEDULE_QUERIES = [
    "get",
    "runs",
    "paused",
    "pause_note",
    "skipped_ticks",
    "dropped_signals",
    "describe",
]
# `pause` reads only its `note`: a string of at most 1200 characters, or refused naming it.
PINNED_PAUSES: list[tuple[Any, bool]] = [
    ({"note": "deploying"}, True),
    ({"note": None, "other": 1}, True),
    ({"note": 5}, False),
    ({"note": {"why": "x"}}, False),
    ({"note": "n" * 1201}, False),
    ({"note": "\U0001f600" * 1200}, True),
]
SCHEDULE = Parent(
    "DurabilitySchedule", "schedule", "object_id", "InvalidStartInput", SCHEDULE_QUERIES
)
SCHEDULE_REFUSALS = {"InvalidRequest", "NoRoomForRuns", "NoLiveSchedule"}


async def test_schedule_messages_are_applied_or_refused_naming_the_field(
    client: Client, task_queue: str, unique: str
) -> None:
    sets = draw(set_payloads, 40, 1)
    sets += [({"expression": e, "version": 7}, "expression") for e in draw(expressions, 25, 14)]
    sets += PINNED_SETS
    cancels = draw(cancel_payloads, 15, 2) + PINNED_CANCELS
    describe_args = draw(
        st.fixed_dictionaries({}, optional={"runs": numbers | leaf, "next": numbers | leaf})
        | any_value(MESSAGE_DEPTH),
        12,
        15,
    )
    async with running_worker(client, task_queue):
        handle = await client.start_workflow(
            "DurabilitySchedule", {}, id=f"schedule:fuzz-{unique}", task_queue=task_queue
        )

        async def dropped() -> int:
            count: int = await handle.query("dropped_signals", rpc_timeout=QUERY_TIMEOUT)
            return count

        await handle.execute_update("set", {"expression": "@every 1h", "version": 1})
        for index, (payload, name) in enumerate(sets + cancels):
            message = "set" if index < len(sets) else "cancel"
            applied = await update(handle, message, payload, name, {"InvalidRequest"})
            await signal_after(handle, message, payload, not applied, dropped)
            await answers(handle, SCHEDULE_QUERIES, f"{message} {name!r}", payload)

        for arg in describe_args:
            # A bad argument fails the query naming the field; the workflow is untouched.
            try:
                await handle.query("describe", arg, rpc_timeout=QUERY_TIMEOUT)
            except WorkflowQueryFailedError as error:
                assert "describe" in str(error), context(f"describe: {error}", arg)
            await answers(handle, SCHEDULE_QUERIES, "describe argument", arg)

        await handle.execute_update("cancel", {})
        await answers(handle, SCHEDULE_QUERIES, "a valid cancel", {})
    await no_failed_tasks(client, handle)


async def test_schedule_backfill_pause_unpause_trigger_take_any_payload(
    client: Client, task_queue: str, unique: str
) -> None:
    backfills = draw(backfill_payloads(int(time.time() * 1000)), 20, 4)
    ignored = draw(ignored_payloads, 30, 3)
    async with running_worker(client, task_queue):
        handle = await client.start_workflow(
            "DurabilitySchedule", {}, id=f"schedule:fuzz-live-{unique}", task_queue=task_queue
        )
        await handle.execute_update("set", {"expression": "@every 1h", "version": 1})
        for payload, name in backfills:
            await update(
                handle,
                "backfill",
                payload,
                name,
                SCHEDULE_REFUSALS,
                ["covers more than", "needs a live schedule", "refused:", "must be after"],
            )
            await answers(handle, SCHEDULE_QUERIES, "backfill", payload)
        for index, payload in enumerate(ignored):
            message = ["pause", "unpause", "trigger"][index % 3]
            big = over_envelope(payload)  # refused whole, though its content is not read
            refusals = {"NoLiveSchedule", "NoRoomForRuns", *(["InvalidRequest"] if big else [])}
            applied = await update(handle, message, payload, message, refusals, ["trigger"])
            assert applied or message == "trigger" or big, context(f"{message} refused", payload)
            await answers(handle, SCHEDULE_QUERIES, message, payload)
        for payload, valid in PINNED_PAUSES:
            applied = await update(handle, "pause", payload, "note", {"InvalidRequest"})
            assert applied is valid, context("pause", payload)
            await answers(handle, SCHEDULE_QUERIES, "pause", payload)
        await handle.execute_update("cancel", {})
    await no_failed_tasks(client, handle)


async def test_schedule_start_inputs_run_or_fail_once_naming_the_field(
    client: Client, task_queue: str, unique: str
) -> None:
    inputs = [(*example, None) for example in draw(schedule_start_inputs(200), 40, 5)]
    inputs += PINNED_SCHEDULE_STARTS

    async def to_its_first_run(handle: WorkflowHandle[Any, Any], input: Any) -> None:
        """The run's child and activities use the settings."""
        await handle.execute_update("set", {"expression": "@every 1h", "version": 1})
        await handle.execute_update("trigger", {})
        run_id = await child_id(handle, input)
        assert run_id is not None, context("no run started for", input)
        await child_schedules_its_activity(client, run_id, input)

    await start_inputs_run_or_fail_once(
        client, task_queue, unique, SCHEDULE, inputs, to_its_first_run
    )


# ------------------------------------------------------------------ ledger

LEDGER_QUERIES = ["snapshot", "claims"]
LEDGER = Parent("OperationLedger", "ledger", "ledger_id", "InvalidStartInput", LEDGER_QUERIES)
PINNED_ENQUEUES = [
    (
        {"operations": [{"id": "deep", "operation_type": "t", "payload": _nest(0, 100, True)}]},
        "operations.0.payload",
    ),
    ({"operations": [{"id": RTL * 333_334, "operation_type": "t"}]}, "operations.0.id"),
]
PINNED_LEDGER_STARTS: list[tuple[Any, str, str | None]] = [
    ({"ledger_id": "z" * 3000}, "ledger_id", None),  # its search attribute is over 2 KiB
    ({}, "ledger_id", "ledger:" + "y" * 950),  # its requests' IDs over 1000 bytes
    ({"compile_activity": "c" * 1001}, "compile_activity", None),
    ({"complete_activity": ""}, "complete_activity", None),
    ({"activity_task_queue": "/_sys/x"}, "activity_task_queue", None),
    ({"x": 1}, "x", None),  # unknown fields are refused
    ({"x": DEEP_205}, "cannot be decoded", None),
]
ENQUEUE_STATE_REFUSALS = ["dependency cycle", "ledger is full", "repeats operations."]
SKIP_STATE_REFUSALS = ["is not known", "already resolved", "is compiling", "in flight"]


async def test_ledger_messages_are_applied_or_refused_naming_the_field(
    client: Client, task_queue: str, unique: str
) -> None:
    enqueues = draw(enqueue_payloads(), 40, 6) + PINNED_ENQUEUES
    release_values = [*draw(any_value(MESSAGE_DEPTH), 10, 7), RTL * 333_334]
    skips = draw(
        mutated(
            # The valid base keeps `reason` within its 500 characters; a big one is a change,
            # so the refusal must name `reason` (a big base reason beside a changed
            # `operation_id` made a refusal name the other field).
            st.fixed_dictionaries(
                {"operation_id": st.sampled_from(OP_IDS) | names},
                optional={"reason": small_text},
            ),
            "skip",
            MESSAGE_DEPTH,
            fields={"reason": big_text},
        ),
        15,
        8,
    )
    ignored = draw(ignored_payloads, 16, 9)
    snapshot_args = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "phase": st.sampled_from(["pending", "resolved", "nope"]) | leaf,
                "after": numbers | leaf,
                "limit": numbers | leaf,
            },
        )
        | any_value(MESSAGE_DEPTH),
        12,
        10,
    )
    async with running_worker(client, task_queue):
        handle = await client.start_workflow(
            "OperationLedger", {}, id=f"ledger:fuzz-{unique}", task_queue=task_queue
        )

        async def dropped() -> int:
            snap = await handle.query("snapshot", rpc_timeout=QUERY_TIMEOUT)
            return int(snap["dropped_signals"])

        for payload, name in enqueues:
            applied = await update(
                handle, "enqueue", payload, name, {"InvalidRequest"}, ENQUEUE_STATE_REFUSALS
            )
            await signal_after(handle, "enqueue", payload, not applied, dropped)
            await answers(handle, LEDGER_QUERIES, f"enqueue {name!r}", payload)
        for payload, name in skips:
            applied = await update(
                handle, "skip", payload, name, {"InvalidRequest"}, SKIP_STATE_REFUSALS
            )
            await signal_after(handle, "skip", payload, not applied, dropped)
            await answers(handle, LEDGER_QUERIES, "skip", payload)
        for value in release_values:
            if over_envelope(value):
                # One over the envelope is refused whole, before its form is read.
                assert not await update(handle, "hold", value, "hold", {"InvalidRequest"})
            token = await handle.execute_update("hold", {}, result_type=str)
            for payload in ({"token": value}, {"token": token, "extra": value}, value):
                await update(handle, "release", payload, "release", {"InvalidRequest"}, ["token"])
                await signal_after(handle, "release", payload, True, dropped)
            assert await handle.execute_update("release", {"token": token}, result_type=bool)
            await answers(handle, LEDGER_QUERIES, "release", value)
        for payload in ignored:
            # resume takes `{}` (or nothing): anything else is refused.
            applied = await update(handle, "resume", payload, "resume", {"InvalidRequest"})
            assert applied == (payload in ({}, None)), context("resume", payload)
            await signal_after(handle, "resume", payload, not applied, dropped)
            await answers(handle, LEDGER_QUERIES, "resume", payload)
        for payload in ignored[:8]:
            # settle too: `{}` waits for quiet (returning its counts), anything else is refused;
            # it changes nothing.
            applied = await update(handle, "settle", payload, "settle", {"InvalidRequest"})
            assert applied == (payload in ({}, None)), context("settle", payload)
            await answers(handle, LEDGER_QUERIES, "settle", payload)
        for arg in snapshot_args:
            try:
                await handle.query("snapshot", arg, rpc_timeout=QUERY_TIMEOUT)
            except WorkflowQueryFailedError as error:
                assert "snapshot query" in str(error), context(f"snapshot: {error}", arg)
            await answers(handle, LEDGER_QUERIES, "snapshot argument", arg)
        # stop refuses anything but an object; an object (unknown fields ignored) stops it.
        for payload in [p for p in ignored if not isinstance(p, dict | None)][:4]:
            assert not await update(handle, "stop", payload, "stop", {"InvalidRequest"})
            await answers(handle, LEDGER_QUERIES, "stop", payload)
        final = await handle.execute_update("stop", {}, rpc_timeout=QUERY_TIMEOUT)
        assert final["stopped"] is True
        await answers(handle, ["snapshot"], "the stopped ledger", None)
    await no_failed_tasks(client, handle)


async def test_ledger_start_inputs_run_or_fail_once_naming_the_field(
    client: Client, task_queue: str, unique: str
) -> None:
    inputs = [(*example, None) for example in draw(ledger_start_inputs(200), 40, 11)]
    inputs += PINNED_LEDGER_STARTS
    operation = {"id": "op", "operation_type": "t", "participants": ["c"]}

    async def to_its_first_request(handle: WorkflowHandle[Any, Any], input: Any) -> None:
        """Compile, the child, its submit use the settings."""
        await handle.execute_update("enqueue", {"operations": [operation]})
        # No child within a few seconds: its compile runs nowhere (a task queue nobody
        # polls), is blocked (an activity nobody registered, a lane of 0, a protocol
        # version not supported)...
        request_id = await child_id(handle, input, timeout=3)
        if request_id is not None:
            await child_schedules_its_activity(client, request_id, input)

    await start_inputs_run_or_fail_once(
        client, task_queue, unique, LEDGER, inputs, to_its_first_request
    )


async def test_a_request_with_a_huge_backoff_coefficient_keeps_retrying(
    client: Client, task_queue: str, unique: str
) -> None:
    """`retry.backoff_coefficient` 1e300 is a valid float, its square is not: the request's
    second retry used to fail its workflow task (OverflowError), on every attempt."""
    retry = {"backoff_coefficient": 1e300, "initial_interval_ms": 1, "maximum_interval_ms": 1}
    config = {"retry": retry, "submit_activity": "unregistered", "query_activity": "unregistered"}
    operation = {"id": "op", "operation_type": "t", "participants": ["c"]}
    async with running_worker(client, task_queue):
        handle = await client.start_workflow(
            "OperationLedger", config, id=f"ledger:backoff-{unique}", task_queue=task_queue
        )
        await handle.execute_update("enqueue", {"operations": [operation]})
        request_id = await child_id(handle, config)
        assert request_id is not None
        child = client.get_workflow_handle(request_id)

        async def retried() -> bool:
            events = await events_of(child)
            assert failed_tasks(events) == [], failed_tasks(events)
            return sum(kind(e) == "ACTIVITY_TASK_SCHEDULED" for e in events) >= 4

        await eventually(retried, timeout=30)
        await handle.execute_update("stop", {})
    await no_failed_tasks(client, handle)
    await no_failed_tasks(client, child)


# ------------------------------------------------------------------ children, unreadable input


async def test_children_started_by_hand_with_garbage_fail_once_naming_the_problem(
    client: Client, task_queue: str, unique: str
) -> None:
    run_input = {
        "run": {
            "object_id": "o",
            "scheduled_time": 1,
            "due_at": 1,
            "idempotency_key": "o:1",
            "params": {},
        },
        "schedule_workflow_id": f"schedule:none-{unique}",
        "settings": {},
    }
    request_input = {"ledger_id": f"none-{unique}", "request": {"id": "r", "payload": {}}}
    cases = [
        ("ScheduledRun", "InvalidStartInput", payload, name)
        for payload, name in draw(mutated(st.just(run_input), "ScheduledRun", 190), 10, 12)
    ] + [
        ("FrozenRequest", "InvalidStartInput", payload, name)
        for payload, name in draw(mutated(st.just(request_input), "FrozenRequest", 190), 10, 13)
    ]
    cases += [
        ("ScheduledRun", "InvalidStartInput", "garbage", "ScheduledRun"),
        ("FrozenRequest", "InvalidStartInput", {"ledger_id": "x", "request": {}}, "id"),
        ("FrozenRequest", "InvalidStartInput", [1, 2], "FrozenRequest"),
    ]

    async def one(index: int, workflow: str, error_type: str, input: Any, name: str) -> None:
        handle = await client.start_workflow(
            workflow, input, id=f"fuzz-{workflow}-{index}-{unique}", task_queue=task_queue
        )
        events = await first_events(handle, {"ACTIVITY_TASK_SCHEDULED"}, timeout=20)
        problems = failed_tasks(events)
        assert problems == [], f"{context(workflow, input)}: failed workflow tasks {problems}"
        if any(kind(e) == "WORKFLOW_EXECUTION_FAILED" for e in events):
            with pytest.raises(WorkflowFailureError) as failure:
                await handle.result()
            cause = failure.value.cause
            assert isinstance(cause, ApplicationError), f"{context(workflow, input)}: {cause!r}"
            assert cause.type == error_type and cause.non_retryable, cause
            assert names_it(cause.message, name) or names_it(cause.message, workflow), (
                f"{context(workflow, input)}: does not name {name!r}: {cause.message[:SHOWN]}"
            )
        else:  # a valid input: it runs (and finds no parent to report to)
            assert any(kind(e) == "ACTIVITY_TASK_SCHEDULED" for e in events), context(
                f"{workflow} neither failed nor ran", input
            )
        await no_failed_tasks(client, handle)

    async with running_worker(client, task_queue):
        await bounded(one, cases)


def _unreadable(data: bytes) -> RawValue:
    return RawValue(Payload(metadata={"encoding": b"json/plain"}, data=data))


UNREADABLE = {
    "nested 205 deep": b'{"params": ' + b"[" * 205 + b"]" * 205 + b"}",
    "a 5000-digit number": b'{"version": ' + b"1" * 5000 + b"}",
    "a lone surrogate": b'{"expression": "\\ud800"}',
    "invalid UTF-8": b'{"expression": "\xff"}',
    "not JSON": b"{not json",
}


async def test_unreadable_payloads_break_nothing(
    client: Client, task_queue: str, unique: str
) -> None:
    """JSON the SDK's converter cannot read: a start input fails the workflow once; as a
    message it is refused (update) or dropped (signal) by the SDK before any handler runs,
    and the workflow goes on."""
    async with running_worker(client, task_queue):
        schedule = await client.start_workflow(
            "DurabilitySchedule", {}, id=f"schedule:messages-{unique}", task_queue=task_queue
        )
        ledger = await client.start_workflow(
            "OperationLedger", {}, id=f"ledger:messages-{unique}", task_queue=task_queue
        )
        for index, (what, data) in enumerate(sorted(UNREADABLE.items())):
            raw = _unreadable(data)
            for parent in (SCHEDULE, LEDGER):
                handle = await client.start_workflow(
                    parent.workflow,
                    raw,
                    id=f"{parent.prefix}:unreadable{index}-{unique}",
                    task_queue=task_queue,
                )
                error_type = parent.start_error
                assert not await started_or_failed(handle, what, error_type, "cannot be decoded")
                await no_failed_tasks(client, handle)
            for handle, message, queries in (
                (schedule, "set", SCHEDULE_QUERIES),
                (schedule, "cancel", SCHEDULE_QUERIES),
                (ledger, "enqueue", LEDGER_QUERIES),
                (ledger, "skip", LEDGER_QUERIES),
            ):
                with pytest.raises(WorkflowUpdateFailedError):
                    await handle.execute_update(message, raw, rpc_timeout=QUERY_TIMEOUT)
                await handle.signal(message, raw)
                await answers(handle, queries, f"{message} {what}", raw)
        assert await schedule.execute_update("set", {"expression": "@every 1h", "version": 1})
        await ledger.execute_update(
            "enqueue", {"operations": [{"id": "a", "operation_type": "t", "participants": ["c"]}]}
        )
        await answers(schedule, SCHEDULE_QUERIES, "a valid set after", None)
        await answers(ledger, LEDGER_QUERIES, "a valid enqueue after", None)
    await no_failed_tasks(client, schedule)
    await no_failed_tasks(client, ledger)
