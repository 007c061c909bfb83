"""A catalog message's payload read strictly (`workflows.catalog.Message.parse`), pure: one
refusal format for both capabilities, naming the field and the value, and bounded."""

from __future__ import annotations

import pytest

from workflows.catalog import Kind, Message, kinds
from workflows.ledger.messages import LEDGER_MESSAGES
from workflows.schedule.messages import SCHEDULE_MESSAGES
from workflows.validation import MAX_SHOWN_PATH, InvalidRequest


@pytest.mark.parametrize(
    "message",
    [m for m in (*SCHEDULE_MESSAGES, *LEDGER_MESSAGES) if m.payload is not None],
    ids=lambda m: m.name,
)
def test_an_unknown_field_of_any_length_is_named_within_bounds(message: Message) -> None:
    """A payload whose field name is 100,000 characters: refused (or, for the few messages
    whose models ignore unknown fields, accepted) with a refusal of bounded size."""
    name = "x" * 100_000
    try:
        message.parse({name: 1})
    except InvalidRequest as refused:
        text = str(refused)
        assert text.startswith(f"invalid {message.name} payload: "), text
        assert "xxxxxxxx" in text  # the field is named...
        assert len(text) < 4 * (MAX_SHOWN_PATH + 100)  # ...but not whole
    else:
        assert message.payload is not None
        assert message.payload.model_config.get("extra") != "forbid"


def test_a_value_of_another_json_type_is_refused_naming_field_and_value() -> None:
    set_message = SCHEDULE_MESSAGES["set"]
    assert set_message.is_(Kind.UPDATE) and set_message.kinds >= kinds(Kind.SIGNAL)
    with pytest.raises(InvalidRequest, match=r"invalid set payload: version: .*\(got '3'\)"):
        set_message.parse({"expression": "@hourly", "version": "3"})
