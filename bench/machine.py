"""What machine the numbers were taken on."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib.metadata import version
from pathlib import Path

from durability.devserver import temporal_cli


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ram_gib() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def _temporal_version() -> str:
    try:
        out = subprocess.run(
            [temporal_cli(), "--version"], capture_output=True, text=True, timeout=20, check=False
        )
        return out.stdout.strip() or out.stderr.strip()
    except (OSError, subprocess.SubprocessError) as error:
        return f"unknown ({error})"


def rss_mib() -> float:
    """This process's resident set size (VmRSS from /proc/self/status), MiB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def describe() -> dict[str, str]:
    return {
        "nproc": str(os.cpu_count()),
        "cpu": _cpu_model(),
        "ram": _ram_gib(),
        "python": platform.python_version(),
        "temporalio": version("temporalio"),
        "temporal": _temporal_version(),
    }


def loadavg() -> str:
    """The 1/5/15-minute load averages: other work on the machine skews every number here."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"
