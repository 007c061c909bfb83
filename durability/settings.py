"""Every setting the worker reads from its environment, declared once.

`SETTINGS` is the table: name, default, meaning and the parser that checks a value.
`python worker.py --help` prints it, the table in docs/configuration.md is generated from it
(`python -m durability.settings` prints the Markdown), and `worker_settings(env)` checks
every entry, then the rules that tie settings together, before anything connects. A bad
value raises `ConfigurationError` naming the setting and the value (a secret's value is
never echoed); the worker prints that one line and exits 2.

An empty durability or OpenTelemetry setting counts as unset. Temporal's own settings
(`TEMPORAL_*`) are read by the SDK's environment configuration; the table checks the ones
that configuration would otherwise misread in silence (`TEMPORAL_TLS=maybe` turns TLS on,
a missing `TEMPORAL_CONFIG_FILE` is ignored).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from durability import DEFAULT_TASK_QUEUE, TASK_QUEUE_ENV
from durability.errors import DurabilityError

if TYPE_CHECKING:
    from activities.schedule import WebhookAllowlist
    from durability.codec import EncryptionCodec

T = TypeVar("T")


class ConfigurationError(DurabilityError, ValueError):
    """A setting is wrong; the message names it and its value."""


# --- parsers: each takes a set (non-empty) value and raises ValueError("must ...") -------

_DIGITS = re.compile(r"[0-9]+")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# Temporal refuses task queue names under this prefix and longer than this many bytes.
RESERVED_TASK_QUEUE_PREFIX = "/_sys/"
MAX_TASK_QUEUE_BYTES = 1000


def integer(low: int, high: int) -> Callable[[str], int]:
    """Plain decimal digits between `low` and `high` inclusive."""

    def parse(text: str) -> int:
        stripped = text.strip()
        if not _DIGITS.fullmatch(stripped) or not low <= int(stripped) <= high:
            raise ValueError(f"must be an integer from {low} to {high}")
        return int(stripped)

    return parse


def boolean(text: str) -> bool:
    """1/true or 0/false, any case: the words Temporal's own settings accept."""
    word = text.strip().lower()
    if word in ("1", "true"):
        return True
    if word in ("0", "false"):
        return False
    raise ValueError("must be 1, 0, true or false")


def text_value(text: str) -> str:
    """Any value, as given."""
    return text


def not_blank(text: str) -> str:
    """Any value but an empty or blank one."""
    if not text.strip():
        raise ValueError("must not be blank")
    return text


def task_queue_name(text: str) -> str:
    """A name Temporal accepts for a task queue."""
    if not text.strip():
        raise ValueError("must not be blank")
    if text.startswith(RESERVED_TASK_QUEUE_PREFIX):
        raise ValueError(
            f"must not start with {RESERVED_TASK_QUEUE_PREFIX!r} (reserved by Temporal)"
        )
    if len(text.encode()) > MAX_TASK_QUEUE_BYTES:
        raise ValueError(f"must be at most {MAX_TASK_QUEUE_BYTES} bytes")
    return text


def host_port(text: str) -> str:
    """`host:port` with a port from 1 to 65535."""
    host, separator, port = text.rpartition(":")
    if not separator or not host or not _DIGITS.fullmatch(port) or not 0 < int(port) < 65536:
        raise ValueError("must be host:port")
    return text


def http_url(text: str) -> str:
    """An absolute http:// or https:// URL with a host."""
    import httpx

    try:
        url = httpx.URL(text.strip())
    except (httpx.InvalidURL, ValueError):
        raise ValueError("must be an http:// or https:// URL") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError("must be an http:// or https:// URL")
    return text.strip()


def log_level(text: str) -> str:
    """One of Python's logging level names, any case."""
    level = text.strip().upper()
    if level not in LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
    return level


def readable_file(text: str) -> str:
    """The path of a file this process can read."""
    path = Path(text)
    try:
        with path.open("rb"):
            pass
    except OSError as error:
        raise ValueError(f"must be a readable file ({error.strerror})") from None
    return text


def otlp_protocol(text: str) -> str:
    """The OTLP protocol durability ships an exporter for."""
    if text.strip() != "http/protobuf":
        raise ValueError("must be http/protobuf (the exporter durability ships)")
    return text.strip()


def traces_exporter(text: str) -> str:
    """otlp, console or none."""
    from durability.tracing import EXPORTERS

    name = text.strip().lower()
    if name not in EXPORTERS:
        raise ValueError(f"must be one of {', '.join(EXPORTERS)}")
    return name


def otel_boolean(text: str) -> bool:
    """true or false, any case (OpenTelemetry's booleans)."""
    word = text.strip().lower()
    if word not in ("true", "false"):
        raise ValueError("must be true or false")
    return word == "true"


def webhook_allowlist(text: str) -> WebhookAllowlist:
    """Comma-separated URL prefixes (activities.schedule.WebhookAllowlist)."""
    from activities.schedule import WebhookAllowlist, WebhookAllowlistError

    try:
        return WebhookAllowlist.parse(text)
    except WebhookAllowlistError as error:
        raise ConfigurationError(str(error)) from None


# --- the table --------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One environment variable: how it is parsed, its default, what it means."""

    name: str
    default: str  # the value used when unset; "" is documented as "unset"
    meaning: str
    parse: Callable[[str], T]
    group: str = "durability"
    secret: bool = False  # never echo the value
    checked_blank: bool = False  # a blank value is checked too, not taken as unset

    def is_set(self, env: Mapping[str, str]) -> bool:
        """Whether the environment gives this setting a value."""
        value = env.get(self.name)
        return value is not None and (self.checked_blank or value.strip() != "")

    def read(self, env: Mapping[str, str]) -> T:
        """The parsed value, or the parsed default when unset; ConfigurationError names
        the setting and the value."""
        raw = env[self.name] if self.is_set(env) else self.default
        try:
            return self.parse(raw)
        except ConfigurationError:
            raise
        except ValueError as error:
            shown = "(value not shown: it is secret)" if self.secret else repr(raw)
            raise ConfigurationError(f"{self.name} {error}, got {shown}") from None


DURABILITY = "durability"
TEMPORAL = "temporal"
OTEL = "otel"
GROUP_TITLES = {
    DURABILITY: "Durability",
    TEMPORAL: "Temporal connection (Temporal's environment configuration)",
    OTEL: "Tracing (OpenTelemetry)",
}

TASK_QUEUE = Setting(
    TASK_QUEUE_ENV, DEFAULT_TASK_QUEUE, "task queue the worker polls", task_queue_name
)
METRICS_PORT = Setting(
    "DURABILITY_METRICS_PORT",
    "9464",
    "Prometheus `/metrics` port on 0.0.0.0 (0 turns metrics off); a port already taken exits 2",
    integer(0, 65535),
)
HEALTH_PORT = Setting(
    "DURABILITY_HEALTH_PORT",
    "0",
    "probe port on 0.0.0.0: `GET /livez` answers while the process runs, `GET /readyz` while "
    "it polls and Temporal answers (503 from SIGTERM on); 0 turns it off",
    integer(0, 65535),
)
DRAIN_SECONDS = Setting(
    "DURABILITY_DRAIN_SECONDS",
    "30",
    "how long SIGTERM/SIGINT waits for running activities before cancelling them",
    integer(0, 86400),
)
MAX_CACHED_WORKFLOWS = Setting(
    "DURABILITY_MAX_CACHED_WORKFLOWS",
    "1000",
    "workflows kept in memory between tasks; 0 replays every task from the first event "
    "(slower, never less correct)",
    integer(0, 1_000_000),
)
MAX_CONCURRENT_WORKFLOW_TASKS = Setting(
    "DURABILITY_MAX_CONCURRENT_WORKFLOW_TASKS",
    "100",
    "workflow tasks run at once",
    integer(1, 1_000_000),
)
MAX_CONCURRENT_ACTIVITIES = Setting(
    "DURABILITY_MAX_CONCURRENT_ACTIVITIES",
    "100",
    "activities run at once",
    integer(1, 1_000_000),
)
POLLER_AUTOSCALING = Setting(
    "DURABILITY_POLLER_AUTOSCALING",
    "1",
    "1: workflow and activity task pollers scale with the server's feedback; 0: the SDK's "
    "fixed 5 per kind, of which only 1 takes new workflows' first tasks "
    "(`python -m bench.scale_worker` measures the difference)",
    boolean,
)
DEPLOYMENT_NAME = Setting(
    "DURABILITY_DEPLOYMENT_NAME",
    "",
    "Worker Deployment name; with `DURABILITY_BUILD_ID` turns on worker versioning (auto-upgrade)",
    text_value,
)
BUILD_ID = Setting(
    "DURABILITY_BUILD_ID",
    "",
    "build id of this worker's Worker Deployment version; set together with "
    "`DURABILITY_DEPLOYMENT_NAME`",
    text_value,
)
ENCRYPTION_KEYS = Setting(
    "DURABILITY_ENCRYPTION_KEYS",
    "",
    "AES-256 key ring `id:base64,id2:base64,...`: payloads under any listed key decrypt "
    "(rotation: docs/security.md)",
    text_value,
    secret=True,
)
ENCRYPTION_KEY_ID = Setting(
    "DURABILITY_ENCRYPTION_KEY_ID",
    "",
    "id of the current key, which encrypts new payloads (may be omitted for a ring of one)",
    text_value,
)
ENCRYPTION_KEY = Setting(
    "DURABILITY_ENCRYPTION_KEY",
    "",
    "a single base64 key, a ring of one (key id `DURABILITY_ENCRYPTION_KEY_ID`, default "
    "`default`); not together with `DURABILITY_ENCRYPTION_KEYS`",
    text_value,
    secret=True,
)
LEDGER_URL = Setting(
    "DURABILITY_LEDGER_URL",
    "http://127.0.0.1:8080",
    "base URL of the built-in `http_submit`/`http_query`/`http_complete` ledger activities",
    http_url,
)
WEBHOOK_ALLOWED_URLS = Setting(
    "DURABILITY_WEBHOOK_ALLOWED_URLS",
    "",
    "comma-separated URL prefixes the built-in webhook activities may POST to; unset, "
    "every webhook is refused",
    webhook_allowlist,
)
LOG_LEVEL = Setting(
    "DURABILITY_LOG_LEVEL", "INFO", f"log level: {', '.join(LOG_LEVELS)}", log_level
)
SKIP_SEARCH_ATTRIBUTE_CHECK = Setting(
    "DURABILITY_SKIP_SEARCH_ATTRIBUTE_CHECK",
    "0",
    "1 skips the startup check that the namespace has durability's search attributes "
    "(a missing or mistyped one exits 2 with the commands that register it)",
    boolean,
)


def _temporal(
    name: str, meaning: str, parse: Callable[[str], Any] = text_value, **options: Any
) -> Setting[Any]:
    return Setting(name, "", meaning, parse, group=TEMPORAL, **options)


TEMPORAL_SETTINGS: tuple[Setting[Any], ...] = (
    Setting(
        "TEMPORAL_ADDRESS",
        "localhost:7233",
        "Temporal frontend `host:port`",
        host_port,
        group=TEMPORAL,
    ),
    Setting(
        "TEMPORAL_NAMESPACE",
        "default",
        "namespace to serve",
        not_blank,
        group=TEMPORAL,
        checked_blank=True,
    ),
    _temporal(
        "TEMPORAL_API_KEY", "API key (turns TLS on unless `TEMPORAL_TLS=false`)", secret=True
    ),
    _temporal("TEMPORAL_PROFILE", "profile to read from the config file"),
    _temporal("TEMPORAL_CONFIG_FILE", "TOML config file with profiles", readable_file),
    _temporal(
        "TEMPORAL_TLS",
        "true/false (1/0): TLS on or off; any `TEMPORAL_TLS_*` setting, even empty, turns it on",
        boolean,
        checked_blank=True,
    ),
    _temporal("TEMPORAL_TLS_CLIENT_CERT_PATH", "client certificate file (mTLS)", readable_file),
    _temporal("TEMPORAL_TLS_CLIENT_CERT_DATA", "client certificate, PEM"),
    _temporal("TEMPORAL_TLS_CLIENT_KEY_PATH", "client key file (mTLS)", readable_file),
    _temporal("TEMPORAL_TLS_CLIENT_KEY_DATA", "client key, PEM", secret=True),
    _temporal(
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH", "CA certificate file of the server", readable_file
    ),
    _temporal("TEMPORAL_TLS_SERVER_CA_CERT_DATA", "CA certificate of the server, PEM"),
    _temporal("TEMPORAL_TLS_SERVER_NAME", "server name for SNI and verification"),
    _temporal(
        "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION",
        "true/false (1/0): skip verifying the server's host name",
        boolean,
        checked_blank=True,
    ),
)
# Read by prefix, so not checked one by one; listed for --help and docs/configuration.md.
GRPC_META = _temporal(
    "TEMPORAL_GRPC_META_<NAME>", "gRPC header `<name>` on every call", secret=True
)

OTEL_SETTINGS: tuple[Setting[Any], ...] = (
    Setting(
        "OTEL_TRACES_EXPORTER",
        "",
        "`otlp` (OTLP/HTTP), `console` or `none`; unset, tracing is off unless an OTLP "
        "endpoint is set",
        traces_exporter,
        group=OTEL,
    ),
    Setting(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "",
        "OTLP/HTTP collector (default http://localhost:4318 when `otlp` is asked for)",
        http_url,
        group=OTEL,
    ),
    Setting(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "",
        "OTLP/HTTP endpoint for traces only",
        http_url,
        group=OTEL,
    ),
    Setting(
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "http/protobuf",
        "OTLP protocol; only http/protobuf",
        otlp_protocol,
        group=OTEL,
    ),
    Setting(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "http/protobuf",
        "OTLP protocol for traces; only http/protobuf",
        otlp_protocol,
        group=OTEL,
    ),
    Setting("OTEL_SDK_DISABLED", "false", "true turns tracing off", otel_boolean, group=OTEL),
    Setting(
        "OTEL_SERVICE_NAME",
        "durability-worker",
        "service name on the worker's spans",
        text_value,
        group=OTEL,
    ),
)

DURABILITY_SETTINGS: tuple[Setting[Any], ...] = (
    TASK_QUEUE,
    METRICS_PORT,
    HEALTH_PORT,
    DRAIN_SECONDS,
    MAX_CACHED_WORKFLOWS,
    MAX_CONCURRENT_WORKFLOW_TASKS,
    MAX_CONCURRENT_ACTIVITIES,
    POLLER_AUTOSCALING,
    DEPLOYMENT_NAME,
    BUILD_ID,
    ENCRYPTION_KEYS,
    ENCRYPTION_KEY_ID,
    ENCRYPTION_KEY,
    LEDGER_URL,
    WEBHOOK_ALLOWED_URLS,
    LOG_LEVEL,
    SKIP_SEARCH_ATTRIBUTE_CHECK,
)
# `make run`'s own settings (`python -m durability.run --help`, docs/operations.md): where
# its dev server, UI and data go. Its worker reads the settings above (DURABILITY_METRICS_PORT
# included) from the same environment.
RUN = "run"
DEV_HOST = Setting(
    "DURABILITY_DEV_HOST",
    "127.0.0.1",
    "address `make run`'s dev server and UI listen on (another address shares them with the "
    "network, and lets others make the worker call your local ports: docs/security.md)",
    not_blank,
    group=RUN,
)
DEV_PORT = Setting(
    "DURABILITY_DEV_PORT",
    "7233",
    "`make run`'s Temporal frontend (gRPC) port; its worker connects to it, other "
    "terminals once `TEMPORAL_ADDRESS` names it (the banner prints the line)",
    integer(1, 65535),
    group=RUN,
)
UI_PORT = Setting(
    "DURABILITY_UI_PORT", "8233", "`make run`'s Temporal UI port", integer(1, 65535), group=RUN
)
DATA_DIR = Setting(
    "DURABILITY_DATA_DIR",
    "data",
    "where `make run` keeps the dev server's database and log (a relative path is taken "
    "from the project's directory)",
    not_blank,
    group=RUN,
)
RUN_SETTINGS: tuple[Setting[Any], ...] = (DEV_HOST, DEV_PORT, UI_PORT, DATA_DIR)

# Every setting, in the order --help and docs/configuration.md list them.
SETTINGS: tuple[Setting[Any], ...] = (
    *DURABILITY_SETTINGS,
    *TEMPORAL_SETTINGS,
    GRPC_META,
    *OTEL_SETTINGS,
)
CHECKED: tuple[Setting[Any], ...] = tuple(s for s in SETTINGS if s is not GRPC_META)


# --- reading them all -------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerSettings:
    """The settings worker.py acts on itself, checked (the tuning ones: worker.worker_tuning).
    The connection reads Temporal's, and DurabilityPlugin the key ring and the activities'
    URLs, from the same environment."""

    task_queue: str
    metrics_port: int
    drain_seconds: int
    deployment: tuple[str, str] | None  # (name, build id)
    webhook_allowlist: WebhookAllowlist
    log_level: str
    skip_search_attribute_check: bool


def deployment(env: Mapping[str, str]) -> tuple[str, str] | None:
    """(deployment name, build id), None when neither is set, refused when one is."""
    name, build_id = DEPLOYMENT_NAME.read(env).strip(), BUILD_ID.read(env).strip()
    if not name and not build_id:
        return None
    if not name or not build_id:
        raise ConfigurationError(
            f"{DEPLOYMENT_NAME.name} and {BUILD_ID.name} go together, got {name!r} and {build_id!r}"
        )
    return name, build_id


def encryption_codec(env: Mapping[str, str]) -> EncryptionCodec | None:
    """The codec the encryption settings configure, None when none is set."""
    from durability.codec import codec_from_env

    try:
        return codec_from_env(env)
    except ValueError as error:  # its messages name the setting, never a key
        raise ConfigurationError(str(error)) from None


def check_all(env: Mapping[str, str]) -> None:
    """Check every setting in the table that the environment sets."""
    for setting in CHECKED:
        if setting.is_set(env):
            setting.read(env)


def worker_settings(env: Mapping[str, str]) -> WorkerSettings:
    """Check every setting and the rules between them, then read the worker's own;
    ConfigurationError names the first bad one."""
    check_all(env)
    encryption_codec(env)
    return WorkerSettings(
        task_queue=TASK_QUEUE.read(env),
        metrics_port=METRICS_PORT.read(env),
        drain_seconds=DRAIN_SECONDS.read(env),
        deployment=deployment(env),
        webhook_allowlist=WEBHOOK_ALLOWED_URLS.read(env),
        log_level=LOG_LEVEL.read(env),
        skip_search_attribute_check=SKIP_SEARCH_ATTRIBUTE_CHECK.read(env),
    )


# --- documentation ----------------------------------------------------------------------


def _shown_default(setting: Setting[Any]) -> str:
    return setting.default or "unset"


def help_text() -> str:
    """What `python worker.py --help` prints."""
    lines = [
        "usage: python worker.py [--help]",
        "",
        "Runs a durability worker: it serves the schedule and ledger workflows and the",
        "built-in activities on one task queue, and drains on SIGTERM/SIGINT. Every setting",
        "comes from the environment; an empty durability or OTEL_ setting counts as unset.",
        "A bad or unusable setting exits 2 with one line naming it.",
    ]
    for group, title in GROUP_TITLES.items():
        lines += ["", f"{title}:"]
        for setting in SETTINGS:
            if setting.group == group:
                lines.append(f"  {setting.name}  (default: {_shown_default(setting)})")
                lines += textwrap.wrap(
                    setting.meaning, width=92, initial_indent=" " * 6, subsequent_indent=" " * 6
                )
    return "\n".join(lines) + "\n"


def markdown_table() -> str:
    """The settings table of docs/configuration.md."""
    rows = ["| setting | default | meaning |", "| --- | --- | --- |"]
    for group, title in GROUP_TITLES.items():
        rows.append(f"| **{title}** | | |")
        for setting in SETTINGS:
            if setting.group == group:
                default = f"`{setting.default}`" if setting.default else "unset"
                rows.append(f"| `{setting.name}` | {default} | {setting.meaning} |")
    return "\n".join(rows) + "\n"


def run_settings_table() -> str:
    """`make run`'s settings as a markdown table (docs/operations.md)."""
    rows = ["| setting | default | meaning |", "| --- | --- | --- |"]
    for setting in (*RUN_SETTINGS, METRICS_PORT):
        rows.append(f"| `{setting.name}` | `{setting.default}` | {setting.meaning} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
