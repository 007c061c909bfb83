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


class CatalogShell:
    """The default dispatch of a shell's catalog handlers (see the module)."""

    _kernel: ShellKernel

    def _parse(self, message: Message, value: Any) -> Any:
        """The payload read as the message's model (a shell passes its own context here)."""
        return message.parse(value)

    def _apply_of(self, message: Message) -> Callable[[Any], Any]:
        apply: Callable[[Any], Any] = getattr(self, f"apply_{message.name}")
        return apply

    def _on_signal(self, message: Message, raw: Any) -> None:
        apply = self._apply_of(message)
        applied = self._kernel.signal(
            message.name, lambda value: (apply(self._parse(message, value)), True)[1], raw
        )
        if applied and message.wakes:
            self._kernel.wake()

    def _on_validate(self, message: Message, raw: Any) -> None:
        check: Callable[[Any], object] | None = getattr(self, f"check_{message.name}", None)
        if check is None:
            self._kernel.validate(lambda value: self._parse(message, value), raw)
        else:
            self._kernel.validate(lambda value: check(self._parse(message, value)), raw)

    def _on_update(self, message: Message, raw: Any) -> Any:
        apply = self._apply_of(message)
        result = self._kernel.update(lambda value: apply(self._parse(message, value)), raw)
        if message.wakes:
            self._kernel.wake()
        return result

    def _on_query(self, message: Message, raw: Any) -> Any:
        answer = getattr(self, f"query_{message.name}")
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
    if message.is_(Kind.SIGNAL):
        setattr(
            cls,
            f"signal__{name}",
            workflow.signal(name=name, description=summary)(_signal_handler(message)),
        )
    if message.is_(Kind.UPDATE):
        asynchronous = inspect.iscoroutinefunction(getattr(cls, f"apply_{name}", None))
        update = workflow.update(name=name, description=summary)(
            _update_handler(message, asynchronous)
        )
        update.validator(_validator(message))
        setattr(cls, f"update__{name}", update)
    if message.is_(Kind.QUERY):
        handler = _query_handler(message)
        setattr(cls, f"query__{name}", workflow.query(name=name, description=summary)(handler))


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
