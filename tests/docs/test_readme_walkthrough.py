"""The README's walkthrough, run as written, in order, against `make run`'s stack, and then
the examples of the reference pages it links to.

Every fenced `sh` and `python` block under the README's "Walkthrough" heading is a step,
except `make run` itself (the test starts `python -m durability.run`) and the `export PATH`
line (the test puts the venv's bin on PATH). Each shell command must exit 0; a comment line
`# prints: TEXT` right after a command says what its output shows, and the test checks it
(whitespace collapsed, `...` matching anything). A step with such a line is polled until its
output shows it, since what a query answers can take the worker a moment.

The pages in `EXAMPLE_PAGES` are read the same way and run after the walkthrough, on the same
stack, side by side (each page uses objects of its own): each of their `sh` blocks that has
a `# prints:` line is run; a block without one is an illustration (a placeholder key, a
cluster's command) and is not.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from durability.run import DEMO
from tests.support.helpers import PROJECT_ROOT, start_run_stack

README = PROJECT_ROOT / "README.md"
# The reference pages whose examples run after the walkthrough, in this order.
EXAMPLE_PAGES = [
    PROJECT_ROOT / "docs" / name for name in ("clients.md", "schedules.md", "ledgers.md")
]
VENV_BIN = Path(sys.executable).parent
PRINTS = "# prints:"
# How long a step with a `# prints:` line may take to show it: `describe` waits for the
# schedule's first run, at the next multiple of 10 s, on a machine that may be busy.
EVENTUALLY_S = 30.0


@dataclass
class Step:
    """One command of a shell block, or a whole Python block, and what it prints."""

    language: str
    source: str
    prints: list[str] = field(default_factory=list)


def walkthrough_blocks(markdown: str) -> list[tuple[str, str]]:
    """The (language, body) of each fenced block between "## Walkthrough" and the next "## "."""
    match = re.search(r"^## Walkthrough\n(.*?)(?=^## )", markdown, re.MULTILINE | re.DOTALL)
    assert match, "README.md has no '## Walkthrough' section"
    return [
        (language, body)
        for language, body in re.findall(
            r"^```(\w*)\n(.*?)^```\n", match.group(1), re.MULTILINE | re.DOTALL
        )
    ]


def shell_commands(body: str) -> list[Step]:
    """A shell block's commands: continuation lines joined, a heredoc kept with its command,
    `# prints:` lines attached to the command before them, other comments dropped."""
    steps: list[Step] = []
    lines = body.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        stripped = line.strip()
        if stripped.startswith(PRINTS):
            assert steps, f"a '{PRINTS}' line before any command: {line!r}"
            steps[-1].prints.append(stripped[len(PRINTS) :].strip())
            continue
        if not stripped or stripped.startswith("#"):
            continue
        command = [line]
        while command[-1].endswith("\\") and index < len(lines):
            command.append(lines[index])
            index += 1
        heredoc = re.search(r"<<-?'?(\w+)'?", command[-1])
        if heredoc:
            while index < len(lines):
                command.append(lines[index])
                index += 1
                if command[-1] == heredoc.group(1):
                    break
        steps.append(Step("sh", "\n".join(command)))
    return steps


def walkthrough_steps(markdown: str) -> list[Step]:
    """Every step of the walkthrough, in order."""
    steps: list[Step] = []
    for language, body in walkthrough_blocks(markdown):
        if language == "python":
            expected = [
                line.strip()[len(PRINTS) :].strip()
                for line in body.splitlines()
                if line.strip().startswith(PRINTS)
            ]
            steps.append(Step("python", body, expected))
        elif language == "sh":
            steps.extend(
                step
                for step in shell_commands(body)
                if step.source != "make run" and not step.source.startswith("export PATH=")
            )
        else:
            raise AssertionError(f"a walkthrough block in {language or 'no language'!r}")
    return steps


def example_steps(markdown: str) -> list[Step]:
    """The steps of a reference page: its `sh` blocks that say what they print."""
    return [
        step
        for language, body in re.findall(
            r"^```(\w*)\n(.*?)^```\n", markdown, re.MULTILINE | re.DOTALL
        )
        if language == "sh" and PRINTS in body
        for step in shell_commands(body)
    ]


def shows(output: str, expected: str) -> bool:
    """Whether `output` shows `expected`: whitespace collapsed, `...` matching anything."""
    flat = " ".join(output.split())
    pattern = ".*?".join(re.escape(" ".join(part.split())) for part in expected.split("..."))
    return re.search(pattern, flat) is not None


async def run_step(step: Step, cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    if step.language == "python":
        script = cwd / "walkthrough_snippet.py"
        script.write_text(step.source)
        argv = [str(VENV_BIN / "python"), str(script)]
    else:
        argv = ["bash", "-c", step.source]
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, output.decode()


async def run_walkthrough(steps: list[Step], cwd: Path, env: dict[str, str]) -> None:
    for step in steps:
        deadline = time.monotonic() + (EVENTUALLY_S if step.prints else 0)
        while True:
            code, output = await run_step(step, cwd, env)
            missing = [text for text in step.prints if not shows(output, text)]
            if code == 0 and not missing:
                break
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"walkthrough or docs example step failed (exit {code}"
                    f"{', not shown: ' + repr(missing) if missing else ''}):\n"
                    f"{step.source}\n--- output ---\n{output}"
                )
            await asyncio.sleep(0.5)


def test_the_walkthrough_is_read_as_steps_with_their_outputs() -> None:
    """The extraction sees the blocks the walkthrough has (a renamed heading or a block in a
    language the test does not run would otherwise skip steps silently)."""
    steps = walkthrough_steps(README.read_text())
    first = " ".join(steps[0].source.replace("\\\n", " ").split())
    assert first == " ".join(DEMO.split()), "the walkthrough starts with `make run`'s demo line"
    assert any(step.language == "python" for step in steps)
    assert any("temporal " in step.source for step in steps)
    assert any("durability ledger" in step.source for step in steps)
    assert sum(len(step.prints) for step in steps) >= 5


@pytest.mark.parametrize("page", EXAMPLE_PAGES, ids=[page.name for page in EXAMPLE_PAGES])
def test_each_reference_page_has_examples_that_run(page: Path) -> None:
    """A page whose blocks stopped saying what they print would silently run nothing."""
    steps = example_steps(page.read_text())
    assert sum(len(step.prints) for step in steps) >= 5, page.name


@pytest.mark.slow
async def test_the_readme_walkthrough_then_the_docs_examples_run_as_written_against_make_run(
    tmp_path: Path,
) -> None:
    steps = walkthrough_steps(README.read_text())
    data_dir, cwd = tmp_path / "data", tmp_path / "cwd"
    cwd.mkdir()
    pages = {page.name: example_steps(page.read_text()) for page in EXAMPLE_PAGES}
    for name in pages:
        (tmp_path / name).mkdir()
    run_stack = await start_run_stack(data_dir)
    stack, address = run_stack.process, run_stack.address
    assert stack.stdout is not None
    drain: asyncio.Task[bytes] | None = None
    try:
        drain = asyncio.create_task(stack.stdout.read())  # keep the pipe from filling
        user_env = dict(
            os.environ,
            PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            TEMPORAL_ADDRESS=address,
            TEMPORAL_NAMESPACE="default",
        )
        await run_walkthrough(steps, cwd, user_env)
        # The pages use objects of their own, so they run side by side, each in its directory.
        await asyncio.gather(
            *(run_walkthrough(page, tmp_path / name, user_env) for name, page in pages.items())
        )
    finally:
        if stack.returncode is None:
            stack.send_signal(signal.SIGINT)
        await asyncio.wait_for(stack.wait(), timeout=60)
        if drain is not None:
            await drain
