"""The wheel (and so the image, which installs the same tree) ships only the product: the
three packages and the `worker` module, no test or benchmark code."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.support.helpers import PROJECT_ROOT

# What a build must not see: installs, caches and earlier build output.
NOT_SOURCE = [".git", ".venv", ".tools", "node_modules", "data", "build", "*.egg-info"]
NOT_SOURCE += ["__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis"]


def test_the_wheel_holds_the_product_and_no_test_or_bench_code(tmp_path: Path) -> None:
    # A copy of the checkout, tests/ and bench/ included, so the build runs next to them
    # without writing build/ into the repository.
    source = tmp_path / "source"
    shutil.copytree(PROJECT_ROOT, source, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), "."],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert built.returncode == 0, built.stderr
    [wheel] = tmp_path.glob("durability-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/", 1)[0] for name in names if not name.startswith("durability-")}
    assert top_level == {"workflows", "activities", "durability", "worker.py"}, top_level
    assert "worker.py" in names
    assert "durability/cli.py" in names and "workflows/schedule/workflow.py" in names
    shipped_tests = [n for n in names if {"tests", "testing", "support"} & set(n.split("/"))]
    assert shipped_tests == [], shipped_tests
