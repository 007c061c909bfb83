"""A known ID sent with another intent is a conflict, not a duplicate; each snapshot operation
lists the dependencies it waits for. The pure core first, then end to end on the dev server
(the update, the signal, the CLI)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from temporalio.client import Client, WorkflowHandle

from tests.support.helpers import durability_cli, eventually, running_worker
from tests.support.ledger import ledger_worker, operations, snapshot
from tests.support.ledger_model import dispatch_all, finish, fresh, graphs, intent
from workflows.budget import STATE_BUDGET_BYTES
from workflows.ledger import core, models
from workflows.ledger.models import (
    MAX_ID_LENGTH,
    MAX_REFERENCES,
    LedgerConfig,
    LedgerInput,
    LedgerState,
    RetentionConfig,
)

# Temporal refuses a payload, a query answer included, over this.
MAX_ANSWER_BYTES = 2 * 1024 * 1024


def enqueue(state: LedgerState, *intents: Any) -> Any:
    return core.enqueue(state, core.validate_enqueue(state, {"operations": list(intents)}))


def outcome(result: Any) -> tuple[list[str], list[str], list[str]]:
    return result.accepted, result.duplicates, result.conflicts


# ---------------------------------------------------------------- conflicts (pure core)

ORIGINAL = intent("a", ["c1", "c2"], ["x"], payload={"colour": "red", "size": 1})


@pytest.mark.parametrize(
    "sent",
    [
        {**ORIGINAL, "operation_type": "text.edit"},
        {**ORIGINAL, "participants": ["c1"]},
        {**ORIGINAL, "participants": ["c2", "c1"]},  # list order counts
        {**ORIGINAL, "dependencies": []},
        {**ORIGINAL, "payload": {"colour": "blue", "size": 1}},
        {**ORIGINAL, "payload": {"colour": "red", "size": 1.5}},
        {**ORIGINAL, "payload": None},
        {**ORIGINAL, "protocol_version": 2},
    ],
)
def test_a_known_id_with_another_intent_is_a_conflict_and_changes_nothing(sent: Any) -> None:
    state = fresh(ORIGINAL)
    before = state.model_dump()
    assert outcome(enqueue(state, sent)) == ([], [], ["a"])
    assert state.model_dump() == before


@pytest.mark.parametrize(
    "sent",
    [
        ORIGINAL,
        {**ORIGINAL, "payload": {"size": 1, "colour": "red"}},  # object key order does not
        {**ORIGINAL, "protocol_version": 1},  # a default, sent or not
    ],
)
def test_a_known_id_with_the_same_intent_is_a_duplicate(sent: Any) -> None:
    state = fresh(ORIGINAL)
    assert outcome(enqueue(state, sent)) == ([], ["a"], [])


def test_a_resolved_operation_is_compared_on_what_it_keeps() -> None:
    """Resolved, an operation keeps its ID and type: another type is a conflict, another
    payload (or participants, dependencies) cannot be seen: a duplicate. The same holds
    before `compact` drops the rest, so an identical intent is never a conflict."""
    config = LedgerConfig(retention=RetentionConfig(resolved_operations=10))
    for compacted in (False, True):
        state = fresh(intent("a", ["c1"], payload={"n": 1}))
        for request_id in dispatch_all(state, config):
            finish(state, request_id, "applied")
        if compacted:
            core.compact(state, config)
            assert state.operations["a"].intent.payload is None
        same = enqueue(state, intent("a", ["c1"], payload={"n": 1}))
        assert outcome(same) == ([], ["a"], []), compacted
        changed = enqueue(state, intent("a", ["c9"], ["z"], payload={"n": 2}))
        assert outcome(changed) == ([], ["a"], []), compacted
        retyped = enqueue(state, intent("a", ["c1"], operation_type="text.edit"))
        assert outcome(retyped) == ([], [], ["a"]), compacted


def test_an_id_remembered_only_cannot_be_compared_and_is_a_duplicate() -> None:
    config = LedgerConfig(retention=RetentionConfig(resolved_operations=0, remembered_ids=10))
    state = fresh(intent("a", ["c1"]))
    for request_id in dispatch_all(state, config):
        finish(state, request_id, "applied")
    core.compact(state, config)
    assert list(state.forgotten) == ["a"] and "a" not in state.operations
    retyped = enqueue(state, intent("a", ["c2"], operation_type="text.edit"))
    assert outcome(retyped) == ([], ["a"], [])


def test_a_batch_naming_one_id_twice_is_refused_whole_whatever_the_intents() -> None:
    state = fresh(ORIGINAL)
    before = state.model_dump()
    for batch in (
        [intent("n", ["c1"]), intent("n", ["c2"])],  # new, two intents
        [intent("n", ["c1"]), intent("n", ["c1"])],  # new, the same intent twice
        [ORIGINAL, {**ORIGINAL, "payload": 7}],  # known: a duplicate and a conflict
    ):
        with pytest.raises(core.LedgerInputError, match=r"operations.1.id '.' repeats"):
            core.validate_enqueue(state, {"operations": batch})
    assert state.model_dump() == before


MUTATIONS = {
    "operation_type": lambda op: {**op, "operation_type": op["operation_type"] + ".v2"},
    "participants": lambda op: {**op, "participants": [*op["participants"], "c-new"]},
    "dependencies": lambda op: {**op, "dependencies": [*op["dependencies"], "elsewhere"]},
    "payload": lambda op: {**op, "payload": {**op["payload"], "extra": True}},
    "protocol_version": lambda op: {**op, "protocol_version": op["protocol_version"] + 1},
    "key order": lambda op: {**op, "payload": dict(reversed(op["payload"].items()))},
}
CHANGES_INTENT = {name for name in MUTATIONS if name != "key order"}


@settings(max_examples=80, deadline=None)
@given(
    graph=graphs(),
    resolved=st.booleans(),
    data=st.data(),
)
def test_the_same_batch_again_with_random_changes_reports_exactly_the_changed_ids(
    graph: list[dict[str, Any]], resolved: bool, data: st.DataObject
) -> None:
    """Each operation of the batch, sent again, unchanged or with one field changed: the
    changed ones are conflicts (only a new type, once resolved), the rest duplicates, and the
    state is the same."""
    for op in graph:
        op["payload"] = {"n": op["payload"]["n"], "m": 0}
        op["participants"] = op["participants"] or ["c0"]
    state = fresh(*graph)
    config = LedgerConfig(concurrency=100, supported_protocol_versions=[1, 2])
    if resolved:
        while frozen := dispatch_all(state, config):
            for request_id in frozen:
                finish(state, request_id, "applied")
        assert all(r.phase == "resolved" for r in state.operations.values())
        core.compact(state, config)
    changes = [data.draw(st.sampled_from([None, *MUTATIONS])) for _ in graph]
    again = [MUTATIONS[c](op) if c else op for op, c in zip(graph, changes, strict=True)]
    before = state.model_dump()
    result = enqueue(state, *again)
    seen = {"operation_type"} if resolved else CHANGES_INTENT
    expected = [op["id"] for op, c in zip(graph, changes, strict=True) if c in seen]
    assert result.accepted == []
    assert result.conflicts == expected
    assert result.duplicates == [op["id"] for op in graph if op["id"] not in expected]
    assert state.model_dump() == before


def test_signal_conflicts_are_counted_carried_and_zero_in_an_older_carried_state() -> None:
    state = fresh(ORIGINAL)
    logged = core.count_signal_conflicts(state, ["a", "b"])
    assert state.signal_conflicts == 2 and "2 known IDs" in logged and "(2 so far)" in logged
    assert "(3 so far): 'a'" in core.count_signal_conflicts(state, ["a"])
    assert core.snapshot(state)["signal_conflicts"] == 3
    carried = core.next_run_input(state, LedgerConfig(), "L").model_dump(mode="json")
    continued = LedgerInput.model_validate(carried).carried_state
    assert continued is not None and continued.signal_conflicts == 3
    del carried["carried_state"]["signal_conflicts"]
    old = LedgerInput.model_validate(carried).carried_state
    assert old is not None and old.signal_conflicts == 0
    assert core.snapshot(old)["signal_conflicts"] == 0


# ---------------------------------------------------------------- waiting_for (pure core)


def waiting(state: LedgerState) -> dict[str, list[str]]:
    return {o["id"]: o["waiting_for"] for o in core.snapshot(state)["operations"]}


def test_waiting_for_lists_unresolved_and_unknown_dependencies_sorted_once() -> None:
    config = LedgerConfig(retention=RetentionConfig(resolved_operations=0, remembered_ids=10))
    state = fresh(intent("gone", ["c0"]))
    for request_id in dispatch_all(state, config):
        finish(state, request_id, "applied")
    core.compact(state, config)  # `gone` is remembered only: resolved
    enqueue(
        state,
        intent("p", ["c1"]),
        intent("q", ["c2"], ["zz-unknown", "p", "gone", "p", "a-unknown"]),
        intent("r", [], ["p"]),  # no participants: blocked, and still waits for p
    )
    assert waiting(state) == {"p": [], "q": ["a-unknown", "p", "zz-unknown"], "r": ["p"]}
    assert dispatch_all(state, config) == ["r-p"]
    assert waiting(state)["q"] == ["a-unknown", "p", "zz-unknown"]  # p is in flight
    finish(state, "r-p", "applied")
    assert waiting(state) == {"p": [], "q": ["a-unknown", "zz-unknown"], "r": []}
    enqueue(state, intent("a-unknown", ["c3"]), intent("zz-unknown", ["c4"]))
    assert waiting(state)["q"] == ["a-unknown", "zz-unknown"]  # known now, not resolved
    for request_id in dispatch_all(state, config):
        finish(state, request_id, "applied")
    assert waiting(state)["q"] == []
    assert dispatch_all(state, config) == ["r-q"]
    # Dispatched, q waits for nothing, even once its dependencies' IDs are forgotten.
    config.retention.remembered_ids = 0
    core.compact(state, config)
    assert not state.forgotten and state.operations["q"].intent.dependencies
    assert waiting(state)["q"] == []


def test_a_full_ledger_waiting_on_the_most_dependencies_answers_within_the_bounds() -> None:
    """The largest `waiting_for`s there can be: every operation with 64 unknown dependencies
    of 100 characters, enqueued until the ledger is full; the biggest page stays well under
    Temporal's 2 MB."""
    state = LedgerState(ledger_id="L")
    deps = [f"{n:02d}".ljust(MAX_ID_LENGTH, "d") for n in range(MAX_REFERENCES)]
    enqueued = 0
    with pytest.raises(core.LedgerInputError, match="ledger is full"):
        while True:
            op = intent(f"op-{enqueued}".ljust(MAX_ID_LENGTH, "o"), ["c"], deps)
            enqueue(state, op)
            enqueued += 1
    assert core.json_size(state) <= STATE_BUDGET_BYTES
    answer = core.snapshot(state, core.parse_snapshot_query({"limit": models.SNAPSHOT_PAGE_MAX}))
    assert len(answer["operations"]) == enqueued
    assert all(o["waiting_for"] == sorted(deps) for o in answer["operations"])
    size = len(json.dumps(answer, separators=(",", ":")))
    assert size < core.json_size(state) * 2 < MAX_ANSWER_BYTES, (size, core.json_size(state))


# ---------------------------------------------------------------- end to end (dev server)


async def execute_enqueue(handle: WorkflowHandle[Any, Any], *intents: Any) -> dict[str, Any]:
    result: dict[str, Any] = await handle.execute_update(
        "enqueue", {"operations": list(intents)}, result_type=dict
    )
    return result


@pytest.mark.cacheless
async def test_update_reports_conflicts_and_the_snapshot_what_each_operation_waits_for(
    client: Client, task_queue: str, unique: str
) -> None:
    async with ledger_worker(client, task_queue):
        handle = await client.start_workflow(
            "OperationLedger", LedgerInput(), id=f"ledger:{unique}", task_queue=task_queue
        )
        first = await execute_enqueue(
            handle, intent("a", ["c1"], ["later"]), intent("b", ["c2"], ["a", "unknown"])
        )
        assert first == {"accepted": ["a", "b"], "duplicates": [], "conflicts": []}
        again = await execute_enqueue(
            handle,
            intent("a", ["c1"], ["later"], payload={"other": True}),
            intent("b", ["c2"], ["a", "unknown"]),
            intent("c", ["c3"], ["b"]),
        )
        assert again == {"accepted": ["c"], "duplicates": ["b"], "conflicts": ["a"]}
        ops = operations(await snapshot(handle))
        assert {i: o["waiting_for"] for i, o in ops.items()} == {
            "a": ["later"],
            "b": ["a", "unknown"],
            "c": ["b"],
        }
        assert {o["phase"] for o in ops.values()} == {"pending"}
        await execute_enqueue(handle, intent("later", ["c4"]))

        async def a_resolved() -> dict[str, Any] | None:
            ops = operations(await snapshot(handle))
            return ops if ops["a"]["phase"] == "resolved" else None

        ops = await eventually(a_resolved, timeout=30)
        assert {i: o["waiting_for"] for i, o in ops.items()} == {
            "a": [],
            "b": ["unknown"],
            "c": ["b"],
            "later": [],
        }
        # The conflict recorded nothing: the compile got a's first payload.
        history = await handle.fetch_history()
        compiled = [
            json.loads(p.data)
            for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")
            for p in e.activity_task_scheduled_event_attributes.input.payloads[:1]
        ]
        assert [c["payload"] for c in compiled if c["id"] == "a"] == [{"op": "a"}]


@pytest.mark.cacheless
async def test_signal_conflicts_are_counted_and_a_repeated_id_drops_the_signal(
    client: Client, task_queue: str, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with ledger_worker(client, task_queue):
        handle = await client.start_workflow(
            "OperationLedger", LedgerInput(), id=f"ledger:{unique}", task_queue=task_queue
        )
        await handle.signal("enqueue", {"operations": [intent("a", ["c1"], ["x"])]})
        await handle.signal(
            "enqueue",
            {
                "operations": [
                    intent("a", ["c1"], ["x"], operation_type="text.edit"),  # a conflict
                    intent("a", ["c1"], ["x"]) | {"id": "b"},
                ]
            },
        )
        # One ID twice in one batch, with two intents: refused whole, the signal dropped.
        await handle.signal("enqueue", {"operations": [intent("d", ["c1"]), intent("d", ["c2"])]})
        await handle.signal("enqueue", {"operations": [intent("a", ["c1"], ["x"])]})  # duplicate

        async def all_applied() -> dict[str, Any] | None:
            snap = await snapshot(handle)
            return snap if snap["dropped_signals"] == 1 and len(snap["operations"]) == 2 else None

        snap = await eventually(all_applied, timeout=20)
        assert snap["signal_conflicts"] == 1
        logged = [r.getMessage() for r in caplog.records if "enqueue signal" in r.getMessage()]
        assert logged and "1 known IDs sent with another intent" in logged[0], logged
        assert "'a'" in logged[0], logged
        ops = operations(snap)
        assert ops["a"]["operation_type"] == "shape.update"
        assert {i: o["waiting_for"] for i, o in ops.items()} == {"a": ["x"], "b": ["x"]}
        update = await execute_enqueue(handle, intent("b", ["c9"]))
        assert update["conflicts"] == ["b"]
        assert (await snapshot(handle))["signal_conflicts"] == 1  # the update's are returned


@pytest.mark.cacheless
async def test_cli_prints_conflicts_and_waiting_for(
    client: Client, dev_server_address: str, task_queue: str, unique: str, tmp_path: Path
) -> None:
    ledger_id = f"cli-{unique}"
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    first.write_text(json.dumps([intent("op-1", ["c1"], ["op-9", "op-0"])]))
    second.write_text(json.dumps([intent("op-1", ["c1"], ["op-0"]), intent("op-2", ["c2"])]))
    cli = ("--task-queue", task_queue, "ledger")
    async with running_worker(client, task_queue):
        await durability_cli(dev_server_address, *cli, "enqueue", ledger_id, "--file", str(first))
        shown = await durability_cli(
            dev_server_address, "--json", *cli, "enqueue", ledger_id, "--file", str(second)
        )
        assert json.loads(shown.stdout) == {
            "accepted": ["op-2"], "duplicates": [], "conflicts": ["op-1"]
        }  # fmt: skip
        table = await durability_cli(
            dev_server_address, *cli, "enqueue", ledger_id, "--file", str(second)
        )
        assert re.search(r"^conflicts\s+op-1$", table.stdout, re.M), table.stdout
        assert re.search(r"^duplicates\s+op-2$", table.stdout, re.M), table.stdout
        page = await durability_cli(dev_server_address, *cli, "snapshot", ledger_id)
        header = page.stdout.splitlines()[0].split()
        assert header[:4] == ["operation", "phase", "blockers", "waiting_for"], page.stdout
        assert re.search(r"^op-1\s+pending\s+-\s+op-0,op-9\s", page.stdout, re.M), page.stdout
        as_json = await durability_cli(dev_server_address, "--json", *cli, "snapshot", ledger_id)
        assert operations(json.loads(as_json.stdout))["op-1"]["waiting_for"] == ["op-0", "op-9"]
