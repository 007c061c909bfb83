"""The rules a new `set` must meet beyond parsing: an expression the user can have meant.

One rule, applied by the workflow's `set` (validator, and handler behind a patch: see
`day_rule`), by the client before it sends (so by the CLI too):

- with the built-in reading, the expression is read as crontab(5) reads it: extensions it
  does not know (`L`, `W`, `#`, `?`) are refused, naming the field and the item;
- an `@every` at least `MIN_EVERY_MS` (1 s);
- an expression with a future occurrence (`0 0 30 2 *` has none);
- a jitter below the expression's interval: the `@every` duration, or the gap between its
  next two firing times.

Pure: the caller passes the schedule's `next_occurrence` and the time.
"""

from __future__ import annotations

from workflows.schedule import cron
from workflows.schedule.cron import NextOccurrence
from workflows.schedule.messages import read_payload
from workflows.schedule.models import JitterRange, SetRequest
from workflows.validation import InvalidRequest, problem

MIN_EVERY_MS = 1_000


def every_ms(expression: str) -> int | None:
    """The duration of an `@every` expression in ms; None for anything else."""
    text = expression.strip()
    if not text.startswith("@every"):
        return None
    try:
        return cron.parse_every(text[len("@every") :])
    except ValueError:
        return None


def refusal(
    expression: str,
    jitter_max_ms: int,
    next_occurrence: NextOccurrence,
    now_ms: int,
    *,
    builtin: bool,
) -> str | None:
    """Why a new `set` of `expression` with a jitter of up to `jitter_max_ms` cannot be
    what the user meant, naming the field and value; None when it can. `expression` has
    already parsed (`SetRequest`)."""
    if builtin:
        try:
            cron.validate(expression)
        except ValueError as error:
            return _refused("expression", f"is not supported: {error}", expression)
    step = every_ms(expression)
    if step is not None and step < MIN_EVERY_MS:
        return _refused(
            "expression",
            f"fires more often than every {MIN_EVERY_MS} ms, the shortest @every",
            expression,
        )
    first = next_occurrence(expression, now_ms)
    if first is None:
        return _refused("expression", "never fires after now", expression)
    if jitter_max_ms <= 0:
        return None
    interval = step
    if interval is None:
        second = next_occurrence(expression, first)
        interval = None if second is None else second - first
    if interval is not None and jitter_max_ms >= interval:
        return _refused(
            "jitter_ms",
            f"must be less than the expression's interval of {interval} ms",
            jitter_max_ms,
        )
    return None


def request_refusal(
    request: SetRequest, next_occurrence: NextOccurrence, now_ms: int, *, builtin: bool
) -> str | None:
    """`refusal` of a parsed `set` request."""
    jitter = request.jitter_ms
    jitter_max_ms = jitter.max_ms if isinstance(jitter, JitterRange) else jitter
    return refusal(request.expression, jitter_max_ms, next_occurrence, now_ms, builtin=builtin)


def parse_new_set(
    raw: object, next_occurrence: NextOccurrence, now_ms: int, *, builtin: bool
) -> SetRequest:
    """`raw` read as a `set` payload, then the rules of a new `set`: InvalidRequest naming
    the field."""
    request: SetRequest = read_payload("set", raw, now_ms, next_occurrence)
    reason = request_refusal(request, next_occurrence, now_ms, builtin=builtin)
    if reason is not None:
        raise InvalidRequest(reason)
    return request


def _refused(field: str, what: str, value: object) -> str:
    """A refusal in the one format of payload refusals (`validation.format_validation_error`)."""
    return f"invalid set payload: {problem(field, what, value)}"
