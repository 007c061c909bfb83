"""The ledger's catalog (`workflows.ledger.messages`) is what its workflows take.

Every message declared is registered as the kinds it names, on `OperationLedger` or
`FrozenRequest`, and nothing else is; each handler is described by its catalog entry; the
catalog's payload model of each update accepts what the core's intake accepts of a valid
payload and refuses what it refuses of a malformed one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest
from temporalio.workflow import _Definition

from workflows.catalog import Catalog, Kind
from workflows.ledger import core
from workflows.ledger.messages import LEDGER_MESSAGES, REQUEST_MESSAGES
from workflows.ledger.models import LedgerConfig, LedgerState, SkipInput
from workflows.ledger.request import FrozenRequestWorkflow
from workflows.ledger.workflow import OperationLedgerWorkflow
from workflows.validation import InvalidRequest


def declared(catalog: Catalog, kind: Kind) -> set[str]:
    return {message.name for message in catalog.of_kind(kind, internal=True)}


@pytest.mark.parametrize(
    ("cls", "catalog"),
    [(OperationLedgerWorkflow, LEDGER_MESSAGES), (FrozenRequestWorkflow, REQUEST_MESSAGES)],
)
def test_each_workflow_takes_exactly_its_catalog(cls: type, catalog: Catalog) -> None:
    definition = _Definition.from_class(cls)
    assert definition is not None
    assert set(definition.signals) == declared(catalog, Kind.SIGNAL)
    assert set(definition.updates) == declared(catalog, Kind.UPDATE)
    assert set(definition.queries) == declared(catalog, Kind.QUERY)


def test_the_ledger_handlers_are_described_by_the_catalog() -> None:
    definition = _Definition.from_class(OperationLedgerWorkflow)
    assert definition is not None
    for name, update in definition.updates.items():
        assert name is not None
        assert update.description == LEDGER_MESSAGES[name].summary
        assert update.validator is not None, name
    for name, signal in definition.signals.items():
        assert name is not None
        assert signal.description == LEDGER_MESSAGES[name].summary


INTENT = {"id": "a", "operation_type": "http", "participants": ["c1"], "payload": {"n": 1}}
VALID: dict[str, Any] = {
    "enqueue": {"operations": [INTENT]},
    "hold": {"token": "t"},
    "release": {"token": "t"},
    "settle": {},
    "resume": {},
    "skip": {"operation_id": "a", "reason": "not needed"},
    "stop": {"query_limit": 3},
}
MALFORMED: dict[str, Any] = {
    "enqueue": {"operations": [{**INTENT, "id": 7}]},
    "hold": {"token": 7},
    "release": {},
    "settle": {"extra": 1},
    "resume": {"extra": 1},
    "skip": {"operation_id": ["a"]},
    "stop": {"query_limit": "3"},
}


def intake(name: str, payload: Any) -> Any:
    """The core's reading of `payload`, without the state's own checks."""
    state = LedgerState(ledger_id="L")
    readers: dict[str, Callable[[], Any]] = {
        "enqueue": lambda: core.parse_enqueue(payload),
        "hold": lambda: core.parse_hold(payload),
        "release": lambda: core.parse_release(payload),
        "settle": lambda: core.validate_empty(state, "settle", payload),
        "resume": lambda: core.validate_empty(state, "resume", payload),
        "skip": lambda: SkipInput.model_validate(payload),
        "stop": lambda: core.parse_stop(payload),
    }
    return readers[name]()


@pytest.mark.parametrize("name", sorted(VALID))
def test_the_catalog_model_reads_a_payload_as_the_core_does(name: str) -> None:
    message = LEDGER_MESSAGES[name]
    assert message.parse(VALID[name]) == intake(name, VALID[name])
    with pytest.raises(InvalidRequest):
        message.parse(MALFORMED[name])
    with pytest.raises((InvalidRequest, ValueError)):
        intake(name, MALFORMED[name])


def test_configure_is_read_against_the_settings_in_effect() -> None:
    current = LedgerConfig()
    assert core.parse_configure({"concurrency": 5}, current).concurrency == 5
    assert LEDGER_MESSAGES["configure"].parse({"concurrency": 5}).concurrency == 5
    with pytest.raises(InvalidRequest):
        LEDGER_MESSAGES["configure"].parse({"concurrency": 0})


def test_every_message_has_its_core_check_and_its_shell_method() -> None:
    """A message added to the catalog without its validator's check, its handler's apply or
    its signal's receive is caught here, not by a failed workflow task."""
    for message in LEDGER_MESSAGES:
        if message.is_(Kind.UPDATE):
            assert callable(getattr(OperationLedgerWorkflow, f"apply_{message.name}", None))
            payload = VALID.get(message.name, {"concurrency": 3})
            state = LedgerState(ledger_id="L", holds=["t"])
            with contextlib.suppress(InvalidRequest):  # refused by the state: it was checked
                core.check_update(message.name, state, LedgerConfig(), payload)
        if message.is_(Kind.SIGNAL):
            assert callable(getattr(OperationLedgerWorkflow, f"receive_{message.name}", None))
        if message.is_(Kind.QUERY) and not message.query_takes_payload:
            assert callable(getattr(OperationLedgerWorkflow, f"query_{message.name}", None))
