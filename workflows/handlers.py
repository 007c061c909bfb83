"""A workflow shell's Temporal handlers, registered from its message catalog.

`handlers_from(catalog)` is a class decorator: for each message it adds the handlers its
kinds name, decorated exactly as hand-written ones (`workflow.signal`, `workflow.update` with
its validator, `workflow.query`), before `workflow.defn` reads the class. Each handler takes
its payload undecoded (`RawValue`: a payload the converter cannot read is the product's
refusal, not the SDK's) and hands it, with its `Message`, to the shell's dispatch methods,
whose defaults are in `CatalogShell`:

- a signal: `_on_signal` reads it through the kernel (dropped, counted and logged when
  refused) and calls `apply_<name>(payload)`;
- an update's validator: `_on_validate` reads it (bounded) and calls `check_<name>(payload)`
  when the shell has one, so a refusal is the update's rejection and nothing is recorded;
- an update: `_on_update` reads it as its validator accepted it and returns
  `apply_<name>(payload)` (awaited when that is a coroutine function);
- a query: `query_<name>(payload)`, or `query_<name>()` for one that takes no argument.

A message whose entry names a `core_method` and that has no `apply_<name>` (`query_<name>`)
in the shell is applied (answered) by that method of the shell's `_core`.

In these method names a dotted wire name (`durability.run_settled`) is its last part.

Two hooks, no-ops by default, let a shell keep what it did before its catalog: `_first`, in
a signal's and an update's handler before anything is read (after the wake of a message that
`wakes_first`), and `_screen`, in all three just before the payload is read as its model (a
refusal there refuses the message, as a parse would).

A shell overrides a dispatch method for a message whose handling differs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RawValue

with workflow.unsafe.imports_passed_through():
    from workflows.catalog import Catalog, Kind, Message
    from workflows.kernel import NO_INPUT, ShellKernel, read_message, rejected_as
    from workflows.validation import InvalidRequest

Shell = TypeVar("Shell", bound=type[Any])
Handler = TypeVar("Handler", bound=Callable[..., Any])


def method_name(prefix: str, message: Message) -> str:
    """The shell's method for `message`: `<prefix>_<name>`, a dotted name by its last part."""
    return f"{prefix}_{message.name.rpartition('.')[2]}"


class CatalogShell:
    """The default dispatch of a shell's catalog handlers (see the module)."""

    _kernel: ShellKernel
    _core: Any

    def _parse(self, message: Message, value: Any) -> Any:
        """The payload read as the message's model (a shell passes its own context here)."""
        return message.parse(value)

    def _first(self, message: Message) -> None:
        """First in a signal's or an update's handler, before its payload is read."""

    def _screen(self, message: Message, *, validating: bool) -> None:
        """Just before the payload is read as its model (in an update's validator when
        `validating`); raise the shell's refusal to refuse the message."""

    def _read(self, message: Message, value: Any, *, validating: bool = False) -> Any:
        self._screen(message, validating=validating)
        return self._parse(message, value)

    def _begin(self, message: Message) -> None:
        if message.wakes_first:
            self._kernel.wake()
        self._first(message)

    def _apply_of(self, message: Message) -> Callable[[Any], Any]:
        return self._handling(message, "apply")

    def _handling(self, message: Message, prefix: str) -> Callable[..., Any]:
        """The shell's `<prefix>_<name>`, or else the core's `core_method`."""
        name = method_name(prefix, message)
        if message.core_method and not hasattr(self, name):
            core_method: Callable[..., Any] = getattr(self._core, message.core_method)
            return core_method
        method: Callable[..., Any] = getattr(self, name)
        return method

    def _on_signal(self, message: Message, raw: Any) -> None:
        self._begin(message)
        apply = self._apply_of(message)
        applied = self._kernel.signal(
            message.name, lambda value: (apply(self._read(message, value)), True)[1], raw
        )
        if applied and message.wakes:
            self._kernel.wake()

    def _on_validate(self, message: Message, raw: Any) -> None:
        check: Callable[[Any], object] | None = getattr(self, method_name("check", message), None)
        if check is None:
            self._kernel.validate(lambda value: self._read(message, value, validating=True), raw)
        else:
            self._kernel.validate(
                lambda value: check(self._read(message, value, validating=True)), raw
            )

    def _on_update(self, message: Message, raw: Any) -> Any:
        self._begin(message)
        apply = self._apply_of(message)
        result = self._kernel.update(lambda value: apply(self._read(message, value)), raw)
        if message.wakes:
            self._kernel.wake()
        return result

    def _on_query(self, message: Message, raw: Any) -> Any:
        answer = self._handling(message, "query")
        if not message.query_takes_payload:
            return answer()
        with rejected_as(InvalidRequest):
            payload = self._parse(message, read_message(f"{message.name} query argument", raw))
        return answer(payload)


def handlers_from(catalog: Catalog) -> Callable[[Shell], Shell]:
    """Class decorator: the Temporal handlers of every message in `catalog` (see the module);
    apply it below `workflow.defn`."""

    def install(cls: Shell) -> Shell:
        for message in catalog:
            _install(cls, message)
        return cls

    return install


def _install(cls: type[Any], message: Message) -> None:
    name, summary = message.name, message.summary
    suffix = message.name.rpartition(".")[2]
    if message.is_(Kind.SIGNAL):
        setattr(
            cls,
            f"signal__{suffix}",
            workflow.signal(name=name, description=summary)(_signal_handler(message)),
        )
    if message.is_(Kind.UPDATE):
        asynchronous = inspect.iscoroutinefunction(
            getattr(cls, method_name("apply", message), None)
        )
        update = workflow.update(name=name, description=summary)(
            _update_handler(message, asynchronous)
        )
        update.validator(_validator(message))
        setattr(cls, f"update__{suffix}", update)
    if message.is_(Kind.QUERY):
        handler = _query_handler(message)
        setattr(cls, f"query__{suffix}", workflow.query(name=name, description=summary)(handler))


def _named(function: Handler, name: str, doc: str, returns: Any) -> Handler:
    function.__name__ = function.__qualname__ = name
    function.__doc__ = doc
    # Real objects, not strings: the SDK reads the payload's type from these hints.
    function.__annotations__ = {"raw": RawValue, "return": returns}
    return function


def _signal_handler(message: Message) -> Callable[..., None]:
    def handler(self: CatalogShell, raw: RawValue = NO_INPUT) -> None:
        self._on_signal(message, raw)

    return _named(handler, f"signal__{message.name}", message.doc, None)


def _update_handler(message: Message, asynchronous: bool) -> Callable[..., Any]:
    if asynchronous:

        async def handler(self: CatalogShell, raw: RawValue = NO_INPUT) -> Any:
            return await self._on_update(message, raw)

    else:

        def handler(self: CatalogShell, raw: RawValue = NO_INPUT) -> Any:  # type: ignore[misc]
            return self._on_update(message, raw)

    return _named(handler, f"update__{message.name}", message.doc, Any)


def _validator(message: Message) -> Callable[..., None]:
    def validator(self: CatalogShell, raw: RawValue = NO_INPUT) -> None:
        self._on_validate(message, raw)

    return _named(validator, f"validate__{message.name}", message.doc, None)


def _query_handler(message: Message) -> Callable[..., Any]:
    if message.query_takes_payload:

        def handler(self: CatalogShell, raw: RawValue = NO_INPUT) -> Any:
            return self._on_query(message, raw)

        return _named(handler, f"query__{message.name}", message.doc, Any)

    def answer(self: CatalogShell) -> Any:
        return self._on_query(message, None)

    answer.__name__ = answer.__qualname__ = f"query__{message.name}"
    answer.__doc__ = message.doc
    answer.__annotations__ = {"return": Any}
    return answer
