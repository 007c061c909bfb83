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

It also hosts the runs of schedules whose `run_host` is `plugin` (the default when their
`activity_task_queue` is null): each such run activity its worker executes, the built-in
`run` or your own activity under the schedule's `run_activity` name, is wrapped by
`durability.hosting.RunHostInterceptor`, which heartbeats for it and enforces its
`run_timeout_ms` in the worker (S9, S10).

Pass it to `Client.connect` (workers built from that client inherit it) or to one
`Worker`, not both: Temporal applies a client's plugins to its workers, so both would
register everything twice. On the client it replaces the client's data converter:
durability's payloads are pydantic models and need the pydantic converter. A worker's
payloads go through its client's converter, and so do the calls your code makes with that
client (a schedule's `set`, its `params` included); converting only the worker's would still
leave those in clear. So on a `Worker` the plugin refuses (ConfigurationError) a client
whose converter is not the one the plugin would have set: connect that client with
`data_converter=durability.connect.data_converter()` (same environment, same key ring).

Every setting the plugin reads (encryption keys, `DURABILITY_WEBHOOK_ALLOWED_URLS`,
`DURABILITY_LEDGER_URL`) comes from `env` (default: the process environment), read and
checked when the plugin is made. Known limit: the product's top-level packages are named
`workflows` and `activities`, so a project of yours with packages of the same names cannot
be imported beside it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from temporalio.converter import DataConverter
from temporalio.plugin import SimplePlugin
from temporalio.worker import WorkerConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from durability import settings
from durability.codec import EncryptionCodec
from durability.connect import data_converter, interceptors
from durability.registry import (
    PASSTHROUGH_PACKAGES,
    all_workflows,
    builtin_activities,
)
from durability.settings import ConfigurationError

if TYPE_CHECKING:
    from activities.schedule import WebhookAllowlist

PLUGIN_NAME = "durability"


def _activity_name(activity: Callable[..., Any]) -> str:
    definition = getattr(activity, "__temporal_activity_definition", None)
    return str(getattr(definition, "name", None) or getattr(activity, "__name__", ""))


def _passing_ours_through(runner: WorkflowRunner | None) -> WorkflowRunner:
    """The worker's workflow runner, its sandbox (if it has one) passing durability's
    packages through: a user's workflow module that imports the plugin is re-imported by the
    sandbox, and with it everything it imports, which some C extensions (`cryptography`,
    under the codec) do not survive."""
    runner = runner or SandboxedWorkflowRunner()
    if isinstance(runner, SandboxedWorkflowRunner):
        restrictions = runner.restrictions.with_passthrough_modules(*PASSTHROUGH_PACKAGES)
        return dataclasses.replace(runner, restrictions=restrictions)
    return runner


class DurabilityPlugin(SimplePlugin):
    """Adds durability's workflows, built-in activities, converter and tracing."""

    def __init__(
        self,
        *,
        webhook_allowlist: WebhookAllowlist | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """`webhook_allowlist`: the URLs the webhook activities may call (default:
        `DURABILITY_WEBHOOK_ALLOWED_URLS`); `env`: where every setting is read (default:
        the process environment). A bad setting raises ConfigurationError naming it."""
        source = os.environ if env is None else env
        self._converter = data_converter(source)
        self.webhook_allowlist = (
            webhook_allowlist
            if webhook_allowlist is not None
            else settings.WEBHOOK_ALLOWED_URLS.read(source)
        )
        self._ledger_url = settings.LEDGER_URL.read(source)
        super().__init__(
            PLUGIN_NAME,
            data_converter=self._data_converter,
            interceptors=interceptors(),
            workflows=self._workflows,
            activities=self._activities,
            workflow_runner=_passing_ours_through,
        )

    def _data_converter(self, _existing: DataConverter | None) -> DataConverter:
        return self._converter

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """As SimplePlugin, after checking that the worker's client encodes payloads the way
        this plugin would (the worker and the calls made with that client use its
        converter, which SimplePlugin does not touch on a worker)."""
        client = config.get("client")
        if client is not None and self not in client.config().get("plugins", []):
            problem = self._converter_mismatch(client.data_converter)
            if problem:
                raise ConfigurationError(
                    f"DurabilityPlugin on a Worker: the worker's client {problem}; pass the "
                    "plugin to Client.connect instead, or connect the client with "
                    "data_converter=durability.connect.data_converter()"
                )
        return super().configure_worker(config)

    def _converter_mismatch(self, theirs: DataConverter) -> str | None:
        ours = self._converter
        if theirs.payload_converter_class is not ours.payload_converter_class:
            return (
                f"uses {theirs.payload_converter_class.__name__}, not the pydantic payload "
                "converter durability's payloads need"
            )
        if not isinstance(ours.payload_codec, EncryptionCodec):
            return None
        codec = theirs.payload_codec
        if not isinstance(codec, EncryptionCodec):
            return (
                "does not encrypt payloads, but DURABILITY_ENCRYPTION_KEYS (or _KEY) is set: "
                "its runs' inputs would be stored in clear"
            )
        if not ours.payload_codec.same_ring(codec):
            return (
                f"encrypts with another key ring (current key {codec.key_id!r}) than "
                f"DURABILITY_ENCRYPTION_KEYS/_KEY_ID (current key {ours.payload_codec.key_id!r})"
            )
        if theirs.failure_converter_class is not ours.failure_converter_class:
            return (
                f"uses {theirs.failure_converter_class.__name__}, which leaves failure messages "
                "in clear, but DURABILITY_ENCRYPTION_KEYS (or _KEY) is set"
            )
        return None

    def _workflows(self, existing: Sequence[type] | None) -> Sequence[type]:
        present = set(existing or [])
        return [*(existing or []), *(w for w in all_workflows() if w not in present)]

    def _activities(
        self, existing: Sequence[Callable[..., Any]] | None
    ) -> Sequence[Callable[..., Any]]:
        taken = {_activity_name(activity) for activity in existing or []}
        ours = [
            activity
            for activity in builtin_activities(
                webhook_allowlist=self.webhook_allowlist, ledger_url=self._ledger_url
            )
            if _activity_name(activity) not in taken
        ]
        return [*(existing or []), *ours]
