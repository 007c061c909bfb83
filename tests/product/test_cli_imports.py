"""What the CLI and the client load before they talk to Temporal, in a fresh interpreter.

`durability --help`, a usage error or a bad JSON option must not pay for the Temporal SDK,
OpenTelemetry, cryptography or the workflows' pydantic models; a client that only reads must
not load the workflows' validators. These are structural checks (which modules are imported),
not timings: `python -m bench.cli_startup` measures the time.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.helpers import PROJECT_ROOT

# Top-level packages (or subpackages) a command that does not call Temporal must not import.
HEAVY = ("temporalio", "opentelemetry", "cryptography", "pydantic", "httpx", "workflows")


def imported_after(code: str) -> set[str]:
    """The modules loaded after running `code` in a new interpreter."""
    # Leave by `os._exit` once the answer is printed: an interpreter that started the SDK's
    # runtime can abort while tearing it down (temporalio/sdk-python#300; docs/python-api.md),
    # which says nothing about what was imported.
    script = (
        f"import sys, json, os\n{code}\n"
        "print(json.dumps(sorted(sys.modules)), flush=True)\nos._exit(0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=PROJECT_ROOT,
        timeout=60,
        check=True,
    )
    return set(json.loads(result.stdout.splitlines()[-1]))


def heavy_among(modules: set[str], packages: tuple[str, ...] = HEAVY) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


def test_importing_the_cli_loads_no_sdk_tracing_crypto_or_models() -> None:
    assert heavy_among(imported_after("import durability.cli")) == []


def test_help_and_usage_errors_load_no_sdk() -> None:
    bad_json = ["schedule", "set", "x", "@hourly", "--version", "1", "--params", "{no"]
    for argv, expected in ((["--help"], 0), (["schedule", "set", "x"], 2), (bad_json, 2)):
        code = (
            "import contextlib, io\n"
            "from durability import cli\n"
            "with contextlib.redirect_stdout(io.StringIO()), "
            "contextlib.redirect_stderr(io.StringIO()):\n"
            "    try:\n"
            f"        code = cli.main({argv!r})\n"
            "    except SystemExit as leaving:\n"
            "        code = leaving.code\n"
            f"assert code == {expected}, code\n"
        )
        assert heavy_among(imported_after(code)) == [], argv


def test_the_client_loads_the_workflows_validators_only_to_check_input() -> None:
    loaded = imported_after("import durability.client")
    validators = (
        "workflows.schedule.core", "workflows.schedule.cron",
        "workflows.ledger.core", "workflows.ledger.models",
    )  # fmt: skip
    assert heavy_among(loaded, validators) == []


def test_a_client_for_calls_loads_no_tracing_interceptor_plugin_or_activities() -> None:
    """What a `durability` command connects with (`connect_client`, tracing off): the SDK's
    OpenTelemetry interceptor (it loads the worker package), the plugin and the activities
    are for workers, and cost a command ~100 ms before its first answer."""
    loaded = imported_after(
        "import asyncio\n"
        "from durability.connect import connect_client\n"
        "try:\n"
        "    asyncio.run(connect_client({'TEMPORAL_ADDRESS': '127.0.0.1:1'}, tracing=False))\n"
        "except Exception:\n"
        "    pass\n"
    )
    heavy = ("temporalio.contrib.opentelemetry", "durability.plugin", "activities")
    assert heavy_among(loaded, heavy) == []
