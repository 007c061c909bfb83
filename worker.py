"""The durability worker: `python worker.py`. A fleet is N of these processes.

Settings (environment):
  TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS*, TEMPORAL_PROFILE
      Temporal's own environment configuration (envconfig); default localhost:7233/default.
  DURABILITY_TASK_QUEUE      task queue to poll (default "durability").
  DURABILITY_METRICS_PORT    Prometheus /metrics port (default 9464; 0 disables).
  DURABILITY_DRAIN_SECONDS   how long SIGTERM/SIGINT waits for running activities (default 30).
  DURABILITY_MAX_CACHED_WORKFLOWS
      workflows kept in memory between their tasks (default 1000; 0 caches none, so every
      workflow task replays the history from its first event: slower, never less correct).
  DURABILITY_MAX_CONCURRENT_WORKFLOW_TASKS   workflow tasks run at once (default 100, >= 1).
  DURABILITY_MAX_CONCURRENT_ACTIVITIES       activities run at once (default 100, >= 1).
  DURABILITY_POLLER_AUTOSCALING
      1 (default): the workflow and activity task pollers scale with the server's feedback;
      0: the SDK's fixed pollers (5 per kind, of which 1 polls for new workflows' first tasks,
      which caps how fast a worker takes up many newly started schedules).
  DURABILITY_DEPLOYMENT_NAME, DURABILITY_BUILD_ID
      worker versioning: both set turns on Worker Deployment versioning.
  DURABILITY_ENCRYPTION_KEYS  id:base64,id2:base64,...: AES-256 key ring; payloads under any
      listed key decrypt (durability/codec.py, docs/security.md for rotation).
  DURABILITY_ENCRYPTION_KEY_ID  id of the current key, which encrypts new payloads.
  DURABILITY_ENCRYPTION_KEY  a single base64 key (a ring of one); not together with _KEYS.
  DURABILITY_LEDGER_URL      base URL of the built-in http_submit/http_query activities.
  DURABILITY_WEBHOOK_ALLOWED_URLS
      comma-separated URL prefixes the built-in run_webhook/on_outcome_webhook activities may
      POST to, e.g. https://hooks.example.com/,http://127.0.0.1:8080/ (scheme, host, port and
      path prefix must match; `host:*` allows any port). Unset or empty (the default), every
      webhook is refused; a malformed entry exits 2 naming it.
  OTEL_SERVICE_NAME, OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_*
      OpenTelemetry tracing (durability/tracing.py): off unless an exporter is asked for;
      `otlp` sends OTLP/HTTP to the endpoint (default http://localhost:4318).
  DURABILITY_SKIP_SEARCH_ATTRIBUTE_CHECK
      1 skips the startup check that the namespace has durability's search attributes
      (default 0: a missing or mistyped one exits 2 with the commands that register it).
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

from activities.schedule import WebhookAllowlist, WebhookAllowlistError
from durability.connect import ConfigurationError, connect, task_queue
from durability.plugin import DurabilityPlugin
from durability.registry import workflow_runner
from durability.tracing import configure_tracing
from workflows import search_attributes

log = logging.getLogger("durability.worker")

# Every environment variable the worker reads besides Temporal's own envconfig ones.
SETTINGS = (
    "DURABILITY_TASK_QUEUE",
    "DURABILITY_METRICS_PORT",
    "DURABILITY_DRAIN_SECONDS",
    "DURABILITY_MAX_CACHED_WORKFLOWS",
    "DURABILITY_MAX_CONCURRENT_WORKFLOW_TASKS",
    "DURABILITY_MAX_CONCURRENT_ACTIVITIES",
    "DURABILITY_DEPLOYMENT_NAME",
    "DURABILITY_BUILD_ID",
    "DURABILITY_ENCRYPTION_KEYS",
    "DURABILITY_ENCRYPTION_KEY",
    "DURABILITY_ENCRYPTION_KEY_ID",
    "DURABILITY_LEDGER_URL",
    "DURABILITY_WEBHOOK_ALLOWED_URLS",
    "DURABILITY_LOG_LEVEL",
    "DURABILITY_SKIP_SEARCH_ATTRIBUTE_CHECK",
)
# The standard OpenTelemetry variables durability.tracing acts on (the SDK reads the rest).
OTEL_SETTINGS = (
    "OTEL_SERVICE_NAME",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_SDK_DISABLED",
)
ENVCONFIG_SETTINGS = (
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "TEMPORAL_API_KEY",
    "TEMPORAL_PROFILE",
    "TEMPORAL_TLS",
    "TEMPORAL_TLS_CLIENT_CERT_PATH",
    "TEMPORAL_TLS_CLIENT_KEY_PATH",
    "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
    "TEMPORAL_TLS_SERVER_NAME",
    "TEMPORAL_CONFIG_FILE",
)


def _int_setting(env: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    raw = env.get(name, str(default))
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigurationError(f"{name} must be >= {minimum}, got {value}")
    return value


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
        max_cached_workflows=_int_setting(env, "DURABILITY_MAX_CACHED_WORKFLOWS", 1000),
        max_concurrent_workflow_tasks=_int_setting(
            env, "DURABILITY_MAX_CONCURRENT_WORKFLOW_TASKS", 100, minimum=1
        ),
        max_concurrent_activities=_int_setting(
            env, "DURABILITY_MAX_CONCURRENT_ACTIVITIES", 100, minimum=1
        ),
        poller_autoscaling=_flag_setting(env, "DURABILITY_POLLER_AUTOSCALING", default=True),
    )


def _flag_setting(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    raw = env.get(name, "")
    if raw.strip() == "":
        return default
    if raw.strip().lower() in ("1", "true", "yes"):
        return True
    if raw.strip().lower() in ("0", "false", "no"):
        return False
    raise ConfigurationError(f"{name} must be 1 or 0, got {raw!r}")


def webhook_allowlist(env: Mapping[str, str]) -> WebhookAllowlist:
    """Read DURABILITY_WEBHOOK_ALLOWED_URLS; a malformed entry raises ConfigurationError
    naming it."""
    try:
        return WebhookAllowlist.from_env(env)
    except WebhookAllowlistError as error:
        raise ConfigurationError(str(error)) from None


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
    return Runtime(
        telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=f"0.0.0.0:{metrics_port}"))
    )


def _deployment(env: Mapping[str, str]) -> WorkerDeploymentConfig | None:
    name = env.get("DURABILITY_DEPLOYMENT_NAME")
    build_id = env.get("DURABILITY_BUILD_ID")
    if not name and not build_id:
        return None
    if not name or not build_id:
        raise ConfigurationError(
            "DURABILITY_DEPLOYMENT_NAME and DURABILITY_BUILD_ID go together, got "
            f"{name!r} and {build_id!r}"
        )
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(deployment_name=name, build_id=build_id),
        use_worker_versioning=True,
        # Schedules and ledgers live forever and continue-as-new often: each new run picks
        # up the current version, so auto-upgrade plus patches is the safe choice.
        default_versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
    )


async def run_worker(env: Mapping[str, str] | None = None) -> None:
    """Connect, serve every workflow and activity, and drain on SIGTERM/SIGINT."""
    env = dict(os.environ if env is None else env)
    queue = task_queue(env)
    drain = _int_setting(env, "DURABILITY_DRAIN_SECONDS", 30)
    metrics_port = _int_setting(env, "DURABILITY_METRICS_PORT", 9464)
    tuning = worker_tuning(env)
    deployment = _deployment(env)
    skip_check = _flag_setting(env, "DURABILITY_SKIP_SEARCH_ATTRIBUTE_CHECK")
    webhooks = webhook_allowlist(env)
    # The one wiring users get too (durability.plugin): converter, codec, tracing, and the
    # workflows and built-in activities of every worker made from this client.
    plugin = DurabilityPlugin(webhook_allowlist=webhooks)
    client = await connect(env, runtime=_runtime(metrics_port), plugins=[plugin])
    if not skip_check:
        await check_search_attributes(client)
    worker = Worker(
        client,
        task_queue=queue,
        workflow_runner=workflow_runner(),
        graceful_shutdown_timeout=timedelta(seconds=drain),
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
        queue,
        client.service_client.config.target_host,
        client.namespace,
        metrics_port or "off",
        ", ".join(f"{name}={value}" for name, value in asdict(tuning).items()),
    )
    log.info(
        "webhook activities may POST under: %s",
        webhooks
        if webhooks.prefixes
        else "nothing (DURABILITY_WEBHOOK_ALLOWED_URLS is unset or empty)",
    )
    async with worker:
        await stop.wait()
        log.info("shutting down: draining for up to %ss", drain)
    log.info("worker stopped")


def main() -> int:
    logging.basicConfig(
        level=os.environ.get("DURABILITY_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    tracing = None
    try:
        tracing = configure_tracing("durability-worker")
        asyncio.run(run_worker())
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
