"""The worker's settings table (durability.settings): complete, documented once, and every
bad or unusable value refused by a real `python worker.py` with rc 2 and one line."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import socket
import sys
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durability import settings
from durability.connect import data_converter
from tests.support.helpers import PROJECT_ROOT, eventually, run_command, subprocess_env, temporal

KEY = base64.b64encode(os.urandom(32)).decode()
OTHER_KEY = base64.b64encode(os.urandom(32)).decode()
SHORT_KEY = base64.b64encode(os.urandom(16)).decode()
WORKER = [sys.executable, str(PROJECT_ROOT / "worker.py")]
# Every file whose code reads the worker's environment (the CLI's codec server and the
# dev stack of `make run` have settings of their own).
READERS = [
    PROJECT_ROOT / "worker.py",
    *(PROJECT_ROOT / "durability" / name for name in
      ("__init__.py", "connect.py", "codec.py", "plugin.py", "registry.py",
       "tracing.py")),
    *(PROJECT_ROOT / "activities").glob("*.py"),
]  # fmt: skip
SETTING_LITERAL = re.compile(r"[\"']((?:DURABILITY|TEMPORAL|OTEL)_[A-Z0-9_]+)")


def test_every_setting_the_code_reads_is_in_the_table() -> None:
    names = {setting.name for setting in settings.SETTINGS}
    read: set[str] = set()
    for path in READERS:
        read |= set(SETTING_LITERAL.findall(path.read_text()))
    assert "DURABILITY_LEDGER_URL" in read  # activities/ledger.py reads it itself
    missing = {name for name in read if name not in names}
    assert not missing, f"read but not in durability.settings.SETTINGS: {sorted(missing)}"


def test_every_default_in_the_table_parses() -> None:
    for setting in settings.SETTINGS:
        if setting.default:
            setting.parse(setting.default)
    for setting in settings.DURABILITY_SETTINGS:
        setting.read({})
    assert settings.worker_settings({}).task_queue == "durability"


def test_the_documented_table_is_the_settings_table() -> None:
    page = (PROJECT_ROOT / "docs" / "configuration.md").read_text()
    begin = page.index("<!-- settings table:")
    begin = page.index("\n", begin) + 1
    end = page.index("<!-- end of settings table -->")
    assert page[begin:end] == settings.markdown_table(), (
        "docs/configuration.md's settings table differs from durability/settings.py: paste "
        "the output of `python -m durability.settings` between the markers"
    )


async def test_help_prints_every_setting_and_exits_zero_without_connecting() -> None:
    # An address nothing listens on: a worker that tried to start would fail with rc 2.
    env = subprocess_env("127.0.0.1:1")
    result = await run_command([*WORKER, "--help"], env=env, timeout=30)
    assert result.returncode == 0
    assert result.stdout == settings.help_text()
    for setting in settings.SETTINGS:
        assert setting.name in result.stdout
    assert result.stderr == ""


async def test_an_unexpected_argument_exits_two_pointing_at_help(dev_server_address: str) -> None:
    result = await run_command(
        [*WORKER, "--task-queue", "q"], check=False, env=subprocess_env(dev_server_address)
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "durability worker: unexpected argument '--task-queue': settings come from the "
        "environment (python worker.py --help lists them)"
    ]


# (settings, the setting the line must name, text the line must hold)
BAD = [
    ({"DURABILITY_TASK_QUEUE": "/_sys/x"}, "DURABILITY_TASK_QUEUE", "reserved by Temporal"),
    ({"DURABILITY_TASK_QUEUE": "q" * 1001}, "DURABILITY_TASK_QUEUE", "at most 1000 bytes"),
    ({"DURABILITY_METRICS_PORT": "99999"}, "DURABILITY_METRICS_PORT", "from 0 to 65535"),
    ({"DURABILITY_METRICS_PORT": "-1"}, "DURABILITY_METRICS_PORT", "from 0 to 65535"),
    ({"DURABILITY_METRICS_PORT": "9464.0"}, "DURABILITY_METRICS_PORT", "integer"),
    ({"DURABILITY_DRAIN_SECONDS": "soon"}, "DURABILITY_DRAIN_SECONDS", "from 0 to 86400"),
    ({"DURABILITY_DRAIN_SECONDS": "1" + "0" * 20}, "DURABILITY_DRAIN_SECONDS", "integer"),
    ({"DURABILITY_DRAIN_SECONDS": "\u0661\u0662"}, "DURABILITY_DRAIN_SECONDS", "integer"),
    ({"DURABILITY_MAX_CACHED_WORKFLOWS": "-1"}, "DURABILITY_MAX_CACHED_WORKFLOWS", "from 0"),
    (
        {"DURABILITY_MAX_CACHED_WORKFLOWS": "1" + "0" * 20},
        "DURABILITY_MAX_CACHED_WORKFLOWS",
        "to 1000000",
    ),
    (
        {"DURABILITY_MAX_CONCURRENT_WORKFLOW_TASKS": "0"},
        "DURABILITY_MAX_CONCURRENT_WORKFLOW_TASKS",
        "from 1",
    ),
    (
        {"DURABILITY_MAX_CONCURRENT_ACTIVITIES": "1_000"},
        "DURABILITY_MAX_CONCURRENT_ACTIVITIES",
        "integer",
    ),
    ({"DURABILITY_POLLER_AUTOSCALING": "yes"}, "DURABILITY_POLLER_AUTOSCALING", "1, 0, true"),
    (
        {"DURABILITY_SKIP_SEARCH_ATTRIBUTE_CHECK": "maybe"},
        "DURABILITY_SKIP_SEARCH_ATTRIBUTE_CHECK",
        "1, 0, true",
    ),
    ({"DURABILITY_BUILD_ID": "b1"}, "DURABILITY_DEPLOYMENT_NAME", "go together"),
    ({"DURABILITY_DEPLOYMENT_NAME": "d"}, "DURABILITY_BUILD_ID", "go together"),
    ({"DURABILITY_LEDGER_URL": "nope"}, "DURABILITY_LEDGER_URL", "http:// or https:// URL"),
    ({"DURABILITY_LEDGER_URL": "ftp://x/"}, "DURABILITY_LEDGER_URL", "http:// or https://"),
    ({"DURABILITY_WEBHOOK_ALLOWED_URLS": "ftp://x/"}, "DURABILITY_WEBHOOK_ALLOWED_URLS", ""),
    ({"DURABILITY_LOG_LEVEL": "loud"}, "DURABILITY_LOG_LEVEL", "one of DEBUG"),
    ({"TEMPORAL_ADDRESS": "not-an-address"}, "TEMPORAL_ADDRESS", "host:port"),
    ({"TEMPORAL_ADDRESS": "localhost:0"}, "TEMPORAL_ADDRESS", "host:port"),
    ({"TEMPORAL_NAMESPACE": ""}, "TEMPORAL_NAMESPACE", "must not be blank"),
    ({"TEMPORAL_TLS": "maybe"}, "TEMPORAL_TLS", "1, 0, true or false"),
    ({"TEMPORAL_TLS": ""}, "TEMPORAL_TLS", "1, 0, true or false"),
    (
        {"TEMPORAL_TLS_DISABLE_HOST_VERIFICATION": "perhaps"},
        "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION",
        "true or false",
    ),
    ({"TEMPORAL_CONFIG_FILE": "/no/such.toml"}, "TEMPORAL_CONFIG_FILE", "readable file"),
    (
        {"TEMPORAL_TLS_CLIENT_CERT_PATH": "/no/cert.pem"},
        "TEMPORAL_TLS_CLIENT_CERT_PATH",
        "readable file",
    ),
    ({"TEMPORAL_PROFILE": "ghost"}, "TEMPORAL_PROFILE", ""),
    ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER", "otlp, console, none"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "garbage"}, "OTEL_EXPORTER_OTLP_ENDPOINT", "URL"),
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
    ({"OTEL_SDK_DISABLED": "maybe"}, "OTEL_SDK_DISABLED", "true or false"),
]
# Keys and certificates: the line names the setting (and the entry) but never the value.
BAD_KEYS = [
    ({"TEMPORAL_TLS_CLIENT_CERT_DATA": "garbage"}, "TEMPORAL_TLS_CLIENT_KEY_PATH", "go together"),
    ({"DURABILITY_ENCRYPTION_KEYS": "garbage"}, "DURABILITY_ENCRYPTION_KEYS", "not id:base64"),
    ({"DURABILITY_ENCRYPTION_KEYS": "A:notbase64"}, "DURABILITY_ENCRYPTION_KEYS", "entry 1"),
    ({"DURABILITY_ENCRYPTION_KEYS": f"A:{SHORT_KEY}"}, "DURABILITY_ENCRYPTION_KEYS", "16 bytes"),
    (
        {"DURABILITY_ENCRYPTION_KEYS": f"A:{KEY},A:{OTHER_KEY}"},
        "DURABILITY_ENCRYPTION_KEYS",
        "same as entry 1's",
    ),
    (
        {"DURABILITY_ENCRYPTION_KEYS": f"A:{KEY}", "DURABILITY_ENCRYPTION_KEY_ID": "B"},
        "DURABILITY_ENCRYPTION_KEY_ID",
        "names no key in",
    ),
    (
        {"DURABILITY_ENCRYPTION_KEYS": f"A:{KEY},B:{OTHER_KEY}"},
        "DURABILITY_ENCRYPTION_KEY_ID",
        "must name the current key",
    ),
    (
        {"DURABILITY_ENCRYPTION_KEY_ID": "A"},
        "DURABILITY_ENCRYPTION_KEY_ID",
        "neither DURABILITY_ENCRYPTION_KEYS nor DURABILITY_ENCRYPTION_KEY is",
    ),
    ({"DURABILITY_ENCRYPTION_KEY": "notbase64"}, "DURABILITY_ENCRYPTION_KEY", "not valid base64"),
    (
        {"DURABILITY_ENCRYPTION_KEYS": f"A:{KEY}", "DURABILITY_ENCRYPTION_KEY": OTHER_KEY},
        "DURABILITY_ENCRYPTION_KEY",
        "not both",
    ),
]


async def refused(address: str, values: dict[str, str]) -> str:
    """Run worker.py with `values`; assert rc 2, one line on stderr, no traceback."""
    result = await run_command(WORKER, check=False, env=subprocess_env(address, **values))
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("durability worker: ")
    return lines[0]


@pytest.mark.parametrize(("values", "setting", "expected"), BAD)
async def test_a_bad_setting_exits_two_with_one_line_naming_it_and_its_value(
    dev_server_address: str, values: dict[str, str], setting: str, expected: str
) -> None:
    line = await refused(dev_server_address, values)
    assert setting in line and expected in line
    for value in values.values():
        assert repr(value)[1:-1][:60] in line or value in line


@pytest.mark.parametrize(("values", "setting", "expected"), BAD_KEYS)
async def test_a_bad_key_setting_exits_two_naming_it_but_never_the_key(
    dev_server_address: str, values: dict[str, str], setting: str, expected: str
) -> None:
    line = await refused(dev_server_address, values)
    assert setting in line and expected in line
    for secret in (KEY, OTHER_KEY, SHORT_KEY, "notbase64", "garbage"):
        assert secret not in line


async def test_a_metrics_port_already_taken_exits_two_naming_it(dev_server_address: str) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = await refused(dev_server_address, {"DURABILITY_METRICS_PORT": str(port)})
    assert f"DURABILITY_METRICS_PORT {port} cannot be used" in line
    assert "Address already in use" in line


async def test_a_missing_namespace_exits_two_even_without_the_search_attribute_check(
    dev_server_address: str, unique: str
) -> None:
    line = await refused(
        dev_server_address,
        {"TEMPORAL_NAMESPACE": f"nowhere-{unique}", "DURABILITY_SKIP_SEARCH_ATTRIBUTE_CHECK": "1"},
    )
    assert f"TEMPORAL_NAMESPACE 'nowhere-{unique}' does not exist" in line


async def test_a_blank_namespace_from_a_profile_exits_two_naming_it(
    dev_server_address: str, tmp_path: Path
) -> None:
    config = tmp_path / "temporal.toml"
    config.write_text(f'[profile.default]\naddress = "{dev_server_address}"\nnamespace = ""\n')
    env = subprocess_env(dev_server_address, TEMPORAL_CONFIG_FILE=str(config))
    for name in ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE"):
        env.pop(name)
    result = await run_command(WORKER, check=False, env=env)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "TEMPORAL_NAMESPACE '' does not exist" in line


async def test_an_unreachable_server_exits_two_naming_the_address() -> None:
    line = await refused("127.0.0.1:1", {})
    assert "cannot connect to Temporal at '127.0.0.1:1'" in line


def test_empty_durability_settings_count_as_unset() -> None:
    blank = {setting.name: "" for setting in settings.DURABILITY_SETTINGS}
    assert settings.worker_settings(blank) == settings.worker_settings({})


def test_the_plugin_refuses_bad_settings_from_its_env_when_made() -> None:
    from durability.plugin import DurabilityPlugin

    for values, setting in [
        ({"DURABILITY_ENCRYPTION_KEYS": "garbage"}, "DURABILITY_ENCRYPTION_KEYS"),
        ({"DURABILITY_LEDGER_URL": "nope"}, "DURABILITY_LEDGER_URL"),
        ({"DURABILITY_WEBHOOK_ALLOWED_URLS": "ftp://x/"}, "DURABILITY_WEBHOOK_ALLOWED_URLS"),
    ]:
        with pytest.raises(settings.ConfigurationError, match=setting):
            DurabilityPlugin(env=values)


async def start_and_trigger(client: Client, schedule_id: str, task_queue: str) -> None:
    """A schedule with a secret in its params, and one run of it triggered now."""
    handle = await client.start_workflow(
        "DurabilitySchedule", {}, id=schedule_id, task_queue=task_queue
    )
    await handle.execute_update(
        "set", {"expression": "0 0 1 1 *", "version": 1, "params": {"secret": "s3cret"}}
    )
    await handle.execute_update("trigger", {})


# os._exit as worker.py does: the SDK's core threads can abort a finalizing interpreter.
RUN_WORKER_WITH_ENV = """
import asyncio, json, os, sys
import worker
asyncio.run(worker.run_worker(json.loads(sys.argv[1])))
sys.stdout.flush()
os._exit(0)
"""


async def test_run_worker_builds_the_plugin_from_the_env_it_is_given(
    dev_server_address: str, task_queue: str, unique: str, tmp_path: Path
) -> None:
    """The process environment has no keys; the mapping given to run_worker has them: the
    run's input must be stored encrypted, so the plugin read the mapping."""
    process_env = subprocess_env(dev_server_address)
    for name in ("DURABILITY_ENCRYPTION_KEYS", "DURABILITY_ENCRYPTION_KEY"):
        process_env.pop(name, None)
    given = {
        **process_env,
        "DURABILITY_TASK_QUEUE": task_queue,
        "DURABILITY_ENCRYPTION_KEYS": f"A:{KEY}",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", RUN_WORKER_WITH_ENV, json.dumps(given),
        env=process_env, cwd=PROJECT_ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    schedule_id = f"schedule:env-{unique}"
    keyed = await Client.connect(
        dev_server_address,
        data_converter=data_converter({"DURABILITY_ENCRYPTION_KEYS": f"A:{KEY}"}),
    )
    try:
        await start_and_trigger(keyed, schedule_id, task_queue)
        raw = await Client.connect(dev_server_address)

        async def run_input_encoding() -> bytes | None:
            async for event in raw.get_workflow_handle(schedule_id).fetch_history_events():
                if (
                    event.event_type
                    == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED
                ):
                    attributes = event.start_child_workflow_execution_initiated_event_attributes
                    return bytes(attributes.input.payloads[0].metadata["encoding"])
            return None

        assert await eventually(run_input_encoding, timeout=30) == b"binary/encrypted"
    finally:
        await temporal(
            dev_server_address, "workflow", "terminate", "--workflow-id", schedule_id, check=False
        )
        process.send_signal(signal.SIGTERM)
        output, _ = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode == 0, output.decode()
