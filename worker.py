"""The durability worker: `python worker.py`. A fleet is N of these processes.

Every setting comes from the environment and is declared once, in durability.settings:
`python worker.py --help` lists them. A bad or unusable one exits 2 with one line naming it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import timedelta

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import (
    PollerBehavior,
    PollerBehaviorAutoscaling,
    PollerBehaviorSimpleMaximum,
    Worker,
    WorkerDeploymentConfig,
)

from activities.schedule import WebhookAllowlist
from durability import health, settings
from durability.connect import ConfigurationError, connect
from durability.health import WorkerHealth
from durability.plugin import DurabilityPlugin
from durability.registry import workflow_runner
from durability.tracing import configure_tracing
from workflows import metrics, search_attributes

log = logging.getLogger("durability.worker")


@dataclass(frozen=True)
class WorkerTuning:
    """The cache size and task concurrency settings (`Worker` options of the same names)."""

    max_cached_workflows: int
    max_concurrent_workflow_tasks: int
    max_concurrent_activities: int
    poller_autoscaling: bool = True

    def poller_behavior(self) -> PollerBehavior:
        """How the workflow and activity task pollers are sized."""
        if self.poller_autoscaling:
            return PollerBehaviorAutoscaling()
        return PollerBehaviorSimpleMaximum()


def worker_tuning(env: Mapping[str, str]) -> WorkerTuning:
    """Read the tuning settings; a bad value raises ConfigurationError naming it."""
    return WorkerTuning(
        max_cached_workflows=settings.MAX_CACHED_WORKFLOWS.read(env),
        max_concurrent_workflow_tasks=settings.MAX_CONCURRENT_WORKFLOW_TASKS.read(env),
        max_concurrent_activities=settings.MAX_CONCURRENT_ACTIVITIES.read(env),
        poller_autoscaling=settings.POLLER_AUTOSCALING.read(env),
    )


def webhook_allowlist(env: Mapping[str, str]) -> WebhookAllowlist:
    """Read DURABILITY_WEBHOOK_ALLOWED_URLS; a malformed entry raises ConfigurationError
    naming it."""
    allowlist: WebhookAllowlist = settings.WEBHOOK_ALLOWED_URLS.read(env)
    return allowlist


# Refusals that mean "you may not look" (e.g. a hosted namespace), not "it is missing".
_NOT_PERMITTED = (RPCStatusCode.PERMISSION_DENIED, RPCStatusCode.UNIMPLEMENTED)


def _cli_type(value_type: IndexedValueType.ValueType) -> str:
    name = IndexedValueType.Name(value_type).removeprefix("INDEXED_VALUE_TYPE_")
    return search_attributes.CLI_TYPE_NAMES.get(name, name.title().replace("_", ""))


async def check_search_attributes(client: Client) -> None:
    """Refuse to start when the namespace lacks the search attributes the workflows upsert.

    Without them every schedule and ledger workflow task fails and retries forever; better
    one clear line at startup. When the operator service may not be asked, warn and go on.
    """
    namespace = client.namespace
    try:
        response = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace)
        )
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise ConfigurationError(
                f"TEMPORAL_NAMESPACE {namespace!r} does not exist on "
                f"{client.service_client.config.target_host}: {error.message}"
            ) from None
        if error.status not in _NOT_PERMITTED:
            raise
        log.warning(
            "cannot list search attributes of namespace %s (%s: %s); not checking that %s "
            "are registered",
            namespace,
            error.status.name,
            error.message,
            ", ".join(key.name for key in search_attributes.ALL),
        )
        return
    registered = dict(response.custom_attributes)
    problems: list[str] = []
    commands: list[str] = []
    for key in search_attributes.ALL:
        want = search_attributes.CLI_TYPE_NAMES[key.indexed_value_type.name]
        create = (
            f"temporal operator search-attribute create --namespace {namespace} "
            f"--name {key.name} --type {want}"
        )
        if key.name not in registered:
            problems.append(f"{key.name} ({want}) is missing")
            commands.append(create)
        elif (have := _cli_type(registered[key.name])) != want:
            problems.append(f"{key.name} is {have}, needs {want}")
            commands.append(
                f"temporal operator search-attribute remove --namespace {namespace} "
                f"--name {key.name} --yes && {create}"
            )
    if problems:
        raise ConfigurationError(
            f"namespace {namespace!r} search attributes: {'; '.join(problems)}; "
            f"register them with: {' && '.join(commands)}"
        )


def _runtime(metrics_port: int) -> Runtime | None:
    if metrics_port == 0:
        return None
    address = f"0.0.0.0:{metrics_port}"
    try:
        prometheus = PrometheusConfig(
            bind_address=address, histogram_bucket_overrides=metrics.HISTOGRAM_BUCKETS
        )
        return Runtime(telemetry=TelemetryConfig(metrics=prometheus))
    except ValueError as error:  # the exporter binds here: e.g. the port is taken
        raise ConfigurationError(
            f"{settings.METRICS_PORT.name} {metrics_port} cannot be used ({error}); choose a "
            "free port, or 0 to turn metrics off"
        ) from None


def _deployment(
    name_and_build_id: tuple[str, str] | None,
) -> WorkerDeploymentConfig | None:
    if name_and_build_id is None:
        return None
    name, build_id = name_and_build_id
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(deployment_name=name, build_id=build_id),
        use_worker_versioning=True,
        # Schedules and ledgers live forever and continue-as-new often: each new run picks
        # up the current version, so auto-upgrade plus patches is the safe choice.
        default_versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
    )


async def check_namespace(client: Client) -> None:
    """Refuse to start on a namespace that does not exist (the search attribute check
    finds that too, but it can be skipped)."""
    try:
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=client.namespace)
        )
    except RPCError as error:
        if error.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.INVALID_ARGUMENT):
            raise ConfigurationError(
                f"TEMPORAL_NAMESPACE {client.namespace!r} does not exist on "
                f"{client.service_client.config.target_host}: {error.message}"
            ) from None
        if error.status not in _NOT_PERMITTED:
            raise


async def run_worker(env: Mapping[str, str] | None = None) -> None:
    """Connect, serve every workflow and activity, and drain on SIGTERM/SIGINT. Every
    setting, the connection's and the plugin's included, is read from `env` (default: the
    process environment)."""
    env = dict(os.environ if env is None else env)
    config = settings.worker_settings(env)
    tuning = worker_tuning(env)
    deployment = _deployment(config.deployment)
    # The one wiring users get too (durability.plugin): converter, codec, tracing, and the
    # workflows and built-in activities of every worker made from this client.
    plugin = DurabilityPlugin(webhook_allowlist=config.webhook_allowlist, env=env)
    runtime = _runtime(config.metrics_port)
    client = await connect(env, runtime=runtime, plugins=[plugin])
    await check_namespace(client)
    if not config.skip_search_attribute_check:
        await check_search_attributes(client)
    worker = Worker(
        client,
        task_queue=config.task_queue,
        workflow_runner=workflow_runner(),
        graceful_shutdown_timeout=timedelta(seconds=config.drain_seconds),
        deployment_config=deployment,
        max_cached_workflows=tuning.max_cached_workflows,
        max_concurrent_workflow_tasks=tuning.max_concurrent_workflow_tasks,
        max_concurrent_activities=tuning.max_concurrent_activities,
        workflow_task_poller_behavior=tuning.poller_behavior(),
        activity_task_poller_behavior=tuning.poller_behavior(),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    log.info(
        "worker polling task queue %r on %s (namespace %s), metrics port %s, %s",
        config.task_queue,
        client.service_client.config.target_host,
        client.namespace,
        config.metrics_port or "off",
        ", ".join(f"{name}={value}" for name, value in asdict(tuning).items()),
    )
    log.info(
        "webhook activities may POST under: %s",
        config.webhook_allowlist
        if config.webhook_allowlist.prefixes
        else "nothing (DURABILITY_WEBHOOK_ALLOWED_URLS is unset or empty)",
    )
    probes = WorkerHealth(client, worker)
    health_port = settings.HEALTH_PORT.read(env)
    async with worker:
        # Served through the drain too: live, and not ready, until the process leaves.
        health_server = (
            await health.serve(probes.not_ready_because, health_port, settings.HEALTH_PORT.name)
            if health_port
            else None
        )
        await stop.wait()
        probes.draining = True
        log.info("shutting down: draining for up to %ss", config.drain_seconds)
    if health_server is not None:
        await health_server.close()
    log.info("worker stopped")


def main(argv: list[str] | None = None) -> int:
    """`python worker.py [--help]`: 0 after a drain or --help, 2 for a bad setting."""
    arguments = sys.argv[1:] if argv is None else argv
    if arguments in (["--help"], ["-h"]):
        print(settings.help_text(), end="")
        return 0
    if arguments:
        print(
            f"durability worker: unexpected argument {arguments[0]!r}: settings come from "
            "the environment (python worker.py --help lists them)",
            file=sys.stderr,
        )
        return 2
    env = dict(os.environ)
    tracing = None
    try:
        log_level = settings.worker_settings(env).log_level
        logging.basicConfig(
            level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        tracing = configure_tracing("durability-worker", env)
        asyncio.run(run_worker(env))
    except ConfigurationError as error:
        print(f"durability worker: {error}", file=sys.stderr)
        return 2
    finally:
        if tracing is not None:
            tracing.shutdown()  # send the last spans before leaving
    return 0


if __name__ == "__main__":
    code = main()
    # Temporal's Rust core keeps threads that can call into Python while the interpreter
    # finalizes and abort it (sdk-python#300), turning a clean drain into SIGABRT. The drain
    # is over and logs are flushed, so leave directly with the real exit code.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
