"""The Temporal mechanics both workflow shells share, used by composition.

`DurabilitySchedule` and `OperationLedger` are each a pure core (which decides) inside a thin
shell (which carries out the core's effects). Everything a shell does that is about Temporal
rather than about its capability lives here, in one `ShellKernel` each shell holds:

- **Start input**: taken undecoded (`RawValue`, default `NO_INPUT`) and decoded by
  `decode_start_input`. Decoded by the SDK, an input the converter cannot read would fail
  every workflow task, forever; decoded here, the workflow fails once, naming the problem
  (`check_start`).
- **Message intake**: an update is parsed by its validator (`validate`) and again by its
  handler (`update`), and a refusal of the shell's refusal type becomes the update's
  rejection: not retryable, typed by the refusal's class, its message naming the field and
  the value (`rejected_as`). A signal of the same name is parsed and applied, or dropped
  (`signal`): counted through the core, logged, never raised (a signal handler that raises
  fails the workflow task, and Temporal retries that task forever).
- **Message payloads** are taken undecoded too (`RawValue`) and read by the kernel
  (`read_message`): a payload larger than `MAX_MESSAGE_BYTES`, or one the converter cannot
  decode (JSON nested deeper than it reads), is refused as `InvalidRequest` naming the message,
  as an update's rejection, a dropped signal or a failed query, where the SDK would have
  rejected it as a retryable `RuntimeError` or dropped the signal uncounted.
- **One wake flag** (`wake`, `woken`, `clear_wake`): set by anything that changes what the
  main loop would decide.
- **Background tasks** (`spawn`, `members`, `busy`): tasks in groups named for what they are
  for, each under a key, leaving their group when they end. The ledger's compiles and
  requests keep their own mappings: they must leave them at the end of their own body,
  before another task can read them, which a done-callback does not promise.
- **The progress barrier** (`progress`): the command a workflow task sends when it applied a
  completion that changes a later decision (below).
- **Close when safe** (`history_long`, `close_when_safe`): once the history is long, wait
  for every handler, let the capability settle
  what it has going (its own drain rule), and close only in a workflow task that delivered
  no update (below).
- **Time**: `now_ms`, the workflow's clock in epoch milliseconds.

## Upstream workarounds

Each works around a Temporal or SDK behaviour; each says what it guards and when to delete it.

- **Cold-worker activation merge** (temporalio/sdk-python#1591, temporalio/sdk-rust#1146):
  when a workflow task applied a completion and sent no command, and the next task carries an
  update, a worker without the workflow cached folds both tasks into one activation and runs
  the update's handler *before* the completion; replay applies the completion first. A
  decision the completion changes is then taken on different state: other commands, a failed
  task. Guard: `progress` sends a status memo upsert (no billed action, one event) so such a
  task always has a command, and core folds two tasks only when the first sent none.
  Delete when the pinned SDK applies resolutions before updates in a merged activation and
  the cold-worker tests pass with `progress` a no-op.
- **Updates aborted by a refused close** (temporalio/temporal#7296): a workflow task that
  closes the run (continue-as-new) is refused with `UnhandledCommand` when an event arrived
  while it ran, and every update *delivered in that task* is aborted as `WorkflowNotReady`
  although it never took effect. Guard: `close_when_safe` closes only in a task that
  delivered no update (`UpdateDeliveries`, behind the `close-in-a-task-without-updates`
  patch), and `durability.client` sends an update again when it is aborted that way. Delete
  when the server retries such updates on the next run instead of aborting them.
- **Updates left unanswered across continue-as-new** (temporalio/temporal#6375): an update
  completed in the task that continues as new can stay unanswered. Guard: `durability.client`
  and the CLI bound every update call (`UnansweredError`). Delete with the upstream fix.
- **Concurrent local activities regrouped on replay** (temporalio/sdk-python#1578, #1881):
  they resolve in completion order live but may be grouped otherwise on replay. Guard: the
  ledger runs one local compile at a time (`OperationLedgerWorkflow._pump`). Delete when
  replay keeps their resolution order.
- **A sandbox-wrapped `ZoneInfo`**: `ZoneInfo`'s shared cache can hand back an instance the
  workflow sandbox wrapped, which `datetime` then rejects. Guard: `workflows.schedule.cron`
  keeps its own cache of private instances. Delete when the sandbox passes `zoneinfo` through.
- **An update over the server's payload limit wedges the workflow**
  (docs/upstream-update-rejection.md): sdk-core echoes the whole request in an update's
  rejection and in its acceptance. Over the server's 2 MB limit, the SDK's own check fails
  that workflow task, and every retry of it (the update is delivered again each time);
  without that check the server terminates the workflow. No workflow code can answer such an
  update. Guard, for what workflow code can do: every validator refuses a payload over
  `MAX_MESSAGE_BYTES` (`read_message`, `admit`), so an update is refused at once under the
  server's limit and none larger than the product's own bound is ever accepted. Delete when
  the server refuses such updates before they reach a worker, or their rejection no longer
  carries the request.
- **Interpreter finalization abort** (temporalio/sdk-python#300): the SDK's Rust threads can
  call into Python while it finalizes. Guard: `worker.py` leaves with `os._exit` after its
  drain. Delete with the upstream fix.
- **The Replayer waits forever on a run with no completed workflow task**: guard in the tests
  (`replay_each` skips such runs and bounds each replay). Delete when `Replayer` returns for
  a history holding only `WorkflowExecutionStarted`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Hashable, Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from types import MappingProxyType
from typing import Any, ParamSpec, TypeVar

from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from workflows.limits import MAX_MESSAGE_BYTES
    from workflows.search_attributes import STATUS_MEMO_KEY
    from workflows.validation import FORMER_TYPE, INVALID_START_INPUT, InvalidRequest

P = ParamSpec("P")
T = TypeVar("T")

# The default of a workflow's `input` parameter when it is started without one (`null`).
NO_INPUT = RawValue(Payload(metadata={"encoding": b"binary/null"}))
# The patches the kernel asks; docs/compat.md says what each side replays and when it can go.
# A run waits for a workflow task without updates before it closes.
CLOSE_WITHOUT_UPDATE_PATCH = "close-in-a-task-without-updates"
# A new run refuses a start setting of the wrong type or an unknown one
# (`workflows.validation`); a run recorded without the marker keeps the setting.
STRICT_START_PATCH = "strict-start-settings"
# A new run refuses its object or ledger ID by its characters (empty, blank, spaces around
# it, control characters).
STRICT_ID_PATCH = "strict-identifiers"
# A signal over the size or depth bound is dropped and counted, not applied.
BOUNDED_SIGNALS_PATCH = "bounded-signal-payloads"
# The timer that asks Temporal for the next workflow task.
NEXT_TASK_DELAY = timedelta(milliseconds=1)
# Under a steady stream of updates every task may deliver one: a run closes anyway after
# this many waits.
MAX_CLOSE_WAITS = 20


def now_ms() -> int:
    """`workflow.now()` in epoch milliseconds (what the cores take as `now`)."""
    return int(workflow.now().timestamp() * 1000)


def decode_start_input(input: Any) -> Any:
    """The start input as JSON values (an input already decoded is returned as it is: a
    subclass's `run` may declare `Any`); ValueError naming the problem when unreadable."""
    if not isinstance(input, RawValue):
        return input
    try:
        return workflow.payload_converter().from_payload(input.payload)
    except Exception as error:  # the converter raises whatever its decoder raises
        raise ValueError(f"the input cannot be decoded: {error}") from None


def read_message(what: str, raw: Any, *, bounded: bool = True) -> Any:
    """A message's payload, taken undecoded (`RawValue`), as JSON values (a value already
    decoded is returned as it is). InvalidRequest naming `what` when it is larger than
    MAX_MESSAGE_BYTES (`bounded`) or cannot be decoded.

    An update's payload is bounded in its validator, so that no update larger than the
    product's own bound is accepted (see "An update over the server's payload limit" above).
    A handler reads its update unbounded: what was accepted is applied, on replay too."""
    if not isinstance(raw, RawValue):
        return raw
    size = raw.payload.ByteSize()
    if bounded and size > MAX_MESSAGE_BYTES:
        raise InvalidRequest(f"{what} payload is {size} bytes, more than {MAX_MESSAGE_BYTES}")
    try:
        return workflow.payload_converter().from_payload(raw.payload, Any)
    except Exception as error:  # the converter raises whatever its decoder raises
        raise InvalidRequest(f"{what} payload cannot be decoded: {error!s:.200}") from None


def _message_name(default: str) -> str:
    info = workflow.current_update_info()
    return default if info is None else f"{info.name} update"


def refusal(
    message: str, refusal_type: str, former_types: Mapping[str, str] = MappingProxyType({})
) -> ApplicationError:
    """A refusal as Temporal carries it: not retryable (the same input is refused again),
    typed, and, where the type had another name in 0.1.0, naming it in its details."""
    former = former_types.get(refusal_type)
    details = () if former is None else ({FORMER_TYPE: former},)
    return ApplicationError(message, *details, type=refusal_type, non_retryable=True)


@contextmanager
def rejected_as(
    *refusals: type[Exception], former_types: Mapping[str, str] = MappingProxyType({})
) -> Iterator[None]:
    """A refusal of one of these kinds becomes an update's rejection (or a query's failure),
    typed by the refusal's class, with its message."""
    try:
        yield
    except refusals as error:
        raise refusal(str(error), type(error).__name__, former_types) from None


# The most events a capability's drain before continue-as-new may add (fewer when it continues
# as new sooner): a run or request that never reports must not grow the history forever.
CONTINUE_AS_NEW_DRAIN_EVENTS = 1000


def drain_allowance(continue_as_new_after_events: int) -> int:
    """How many events the drain before continue-as-new may add to a run that continues as
    new at `continue_as_new_after_events`."""
    return min(continue_as_new_after_events, CONTINUE_AS_NEW_DRAIN_EVENTS)


def history_long(events: int, *, or_suggested: bool = True) -> bool:
    """Whether this run's history has `events` events, or (`or_suggested`) Temporal suggests
    continuing as new: the capability then begins its drain."""
    info = workflow.info()
    if or_suggested and info.is_continue_as_new_suggested():
        return True
    return info.get_current_history_length() >= events


class UpdateDeliveries:
    """Which workflow task last delivered an update to this run (see "Updates aborted by a
    refused close" above). Whether a task delivered an update is read from the history
    length every update handler notes, which a task's updates share under any grouping."""

    def __init__(self) -> None:
        self._last_task: int | None = None
        self._waits = 0

    def note(self) -> None:
        """Called by `ShellKernel.update`, first in every update handler."""
        self._last_task = workflow.info().get_current_history_length()

    def in_this_task(self) -> bool:
        """Whether the current workflow task delivered an update."""
        return self._last_task == workflow.info().get_current_history_length()

    def closing_must_wait(self) -> bool:
        """Whether to wait for another task before closing the run."""
        if self._waits >= MAX_CLOSE_WAITS or not self.in_this_task():
            return False
        if not workflow.patched(CLOSE_WITHOUT_UPDATE_PATCH):
            return False
        self._waits += 1
        return True


class ShellKernel:
    """The Temporal half one workflow shell shares with the other (see the module).

    `refusal` is the capability's refusal type (its update rejections); `count_drop` is the
    core transition that counts a dropped signal and returns the count so far.
    """

    def __init__(
        self,
        refusal: type[Exception],
        count_drop: Callable[[], int],
        former_types: Mapping[str, str] = MappingProxyType({}),
    ) -> None:
        self._refusal = refusal
        self._count_drop = count_drop
        self.former_types = former_types
        self._deliveries = UpdateDeliveries()
        self._tasks: dict[str, dict[Hashable, asyncio.Task[Any]]] = {}
        self.woken = False

    # --- start input

    def check_start(
        self,
        error: str | None,
        coerced: str | None,
        former_type: str,
        bad_id: str | None = None,
    ) -> None:
        """First in `run`: fail the run once (`InvalidStartInput`, naming the problem; its
        details name `former_type`, the 0.1.0 name) when its start input is refused. A
        setting only a lax reading accepts (`coerced`), and an ID refused by its characters
        (`bad_id`), are refused for runs started from now on; a run recorded before (no
        patch marker) keeps them."""
        if error is None and bad_id is not None and workflow.patched(STRICT_ID_PATCH):
            error = bad_id
        if error is None and coerced is not None and workflow.patched(STRICT_START_PATCH):
            error = coerced
        if error is not None:
            raise refusal(error, INVALID_START_INPUT, {INVALID_START_INPUT: former_type})

    # --- message intake

    def validate(self, parse: Callable[..., T], *args: Any, **kwargs: Any) -> None:
        """In an update's validator: `parse(*args)`, each `RawValue` argument read (bounded)
        by `read_message`, its refusal the update's rejection."""
        with rejected_as(self._refusal, InvalidRequest, former_types=self.former_types):
            what = _message_name("update")
            parse(*(read_message(what, arg) for arg in args), **kwargs)

    def admit(self, raw: Any) -> None:
        """In an update's validator whose checks do not read the payload: refuse one too large
        or unreadable all the same (see `read_message`)."""
        self.validate(lambda _: None, raw)

    def update(self, parse: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """First in an update's handler: note the delivery, then `parse(*args)` (or apply:
        any call whose refusal is the update's rejection), each `RawValue` argument read as
        its validator accepted it."""
        self._deliveries.note()
        with rejected_as(self._refusal, InvalidRequest, former_types=self.former_types):
            what = _message_name("update")
            return parse(*(read_message(what, arg, bounded=False) for arg in args), **kwargs)

    def signal(self, name: str, parse: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
        """In a signal's handler: `parse(*args)`, each `RawValue` argument read by
        `read_message`, or None when refused: the signal is dropped (counted and logged)."""
        try:
            values = [self._signal_payload(name, arg) for arg in args]
            return parse(*values, **kwargs)
        except (self._refusal, InvalidRequest) as error:
            self.drop(name, error)
            return None

    def _signal_payload(self, name: str, raw: Any) -> Any:
        what = f"{name} signal"
        try:
            return read_message(what, raw)
        except InvalidRequest:
            # A run recorded without the marker applied a large signal: it replays so.
            if isinstance(raw, RawValue) and not workflow.patched(BOUNDED_SIGNALS_PATCH):
                return read_message(what, raw, bounded=False)
            raise

    def drop(self, name: str, error: Exception) -> None:
        """Count and log a signal that cannot be applied."""
        dropped = self._count_drop()
        workflow.logger.warning("dropped %s signal (%d dropped so far): %s", name, dropped, error)

    # --- the wake flag

    def wake(self) -> None:
        """Something changed what the main loop would decide."""
        self.woken = True

    def clear_wake(self) -> None:
        """The main loop is about to decide on the current state."""
        self.woken = False

    # --- background tasks

    def spawn(
        self, group: str, coroutine: Coroutine[Any, Any, T], key: Hashable = None
    ) -> asyncio.Task[T]:
        """Run `coroutine` as a task of `group`, under `key` (by default the task itself); it
        leaves the group when it ends (a done-callback: use it only where nothing reads the
        group between the task's last step and that callback)."""
        task = asyncio.create_task(coroutine)
        members = self._tasks.setdefault(group, {})
        member_key = task if key is None else key
        members[member_key] = task

        def leave(_: asyncio.Task[T]) -> None:
            if members.get(member_key) is task:
                del members[member_key]

        task.add_done_callback(leave)
        return task

    def members(self, group: str) -> Mapping[Any, asyncio.Task[Any]]:
        """The tasks of `group` still going, by key."""
        return self._tasks.get(group, {})

    def busy(self, *groups: str) -> bool:
        """Whether a task of any of these groups is still going."""
        return any(self._tasks.get(group) for group in groups)

    # --- the progress barrier

    def progress(self, status: Mapping[str, Any]) -> None:
        """Call in the activation that applied a completion which changes a later decision:
        this workflow task then sends a command (see "Cold-worker activation merge")."""
        workflow.upsert_memo({STATUS_MEMO_KEY: dict(status)})

    # --- closing

    async def close_when_safe(
        self,
        settle: Callable[[], Coroutine[Any, Any, bool]],
        ready: Callable[[], bool] = lambda: True,
    ) -> bool:
        """Wait until the run may close: `ready()` and every handler finished, then
        `settle()` (the capability's drain rule; False gives the close up), in a workflow
        task that delivered no update. Returns whether to close now."""
        while True:
            await workflow.wait_condition(lambda: ready() and workflow.all_handlers_finished())
            if not await settle():
                return False
            if not self._deliveries.closing_must_wait():
                return True
            await workflow.sleep(NEXT_TASK_DELAY, summary="close in a task without updates")
