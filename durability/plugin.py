"""`DurabilityPlugin`: durability's workflows and activities in your own Temporal client and
worker, next to your own code.

    client = await Client.connect("localhost:7233", plugins=[DurabilityPlugin()])
    worker = Worker(client, task_queue="my-queue", workflows=[MyWorkflow], activities=[run])

The plugin gives the client the pydantic data converter (with the encryption codec when
`DURABILITY_ENCRYPTION_KEYS` / `DURABILITY_ENCRYPTION_KEY` is set) and OpenTelemetry's
`TracingInterceptor`, and gives every worker made from that client the four workflows
(`DurabilitySchedule`, `ScheduledRun`, `OperationLedger`, `FrozenRequest`) and the built-in
activities. A built-in activity whose name your worker already registers is left out, so
your own `run` / `on_outcome` / `compile` / `submit` / `query` take its place.

Pass it to `Client.connect` (workers built from that client inherit it) or to one
`Worker`, not both: Temporal applies a client's plugins to its workers, so both would
register everything twice. It replaces the client's data converter: durability's payloads
are pydantic models and need the pydantic converter. Known limit: the product's top-level
packages are named `workflows` and `activities`, so a project of yours with packages of
the same names cannot be imported beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from temporalio.converter import DataConverter
from temporalio.plugin import SimplePlugin

from durability.connect import data_converter, interceptors
from durability.registry import all_workflows, builtin_activities

if TYPE_CHECKING:
    from activities.schedule import WebhookAllowlist

PLUGIN_NAME = "durability"


def _activity_name(activity: Callable[..., Any]) -> str:
    definition = getattr(activity, "__temporal_activity_definition", None)
    return str(getattr(definition, "name", None) or getattr(activity, "__name__", ""))


class DurabilityPlugin(SimplePlugin):
    """Adds durability's workflows, built-in activities, converter and tracing."""

    def __init__(
        self,
        *,
        webhook_allowlist: WebhookAllowlist | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """`webhook_allowlist`: the URLs the webhook activities may call (default: the
        process's `DURABILITY_WEBHOOK_ALLOWED_URLS`); `env`: where the encryption settings
        are read (default: the process environment)."""
        self._webhook_allowlist = webhook_allowlist
        self._env = env
        super().__init__(
            PLUGIN_NAME,
            data_converter=self._data_converter,
            interceptors=interceptors(),
            workflows=self._workflows,
            activities=self._activities,
        )

    def _data_converter(self, _existing: DataConverter | None) -> DataConverter:
        return data_converter(self._env)

    def _workflows(self, existing: Sequence[type] | None) -> Sequence[type]:
        present = set(existing or [])
        return [*(existing or []), *(w for w in all_workflows() if w not in present)]

    def _activities(
        self, existing: Sequence[Callable[..., Any]] | None
    ) -> Sequence[Callable[..., Any]]:
        taken = {_activity_name(activity) for activity in existing or []}
        ours = [
            activity
            for activity in builtin_activities(webhook_allowlist=self._webhook_allowlist)
            if _activity_name(activity) not in taken
        ]
        return [*(existing or []), *ours]
