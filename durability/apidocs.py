"""The Python API reference, generated from the docstrings with pdoc.

    python -m durability.apidocs build/api    # then open build/api/index.html

The test suite builds it too (tests/product/test_cli_help.py), so a docstring that pdoc
cannot render, or a name exported that does not resolve, fails a test.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

# The modules a user of the product imports: the client (with the modules its methods are
# defined in) and its errors, the connection, the worker plugin with its codec, and the settings.
API_MODULES = (
    "durability.client",
    "durability.schedule_client",
    "durability.ledger_client",
    "durability.bulk",
    "durability.sending",
    "durability.errors",
    "durability.connect",
    "durability.plugin",
    "durability.codec",
    "durability.settings",
)


def build(output_directory: Path) -> list[str]:
    """Write the HTML reference into `output_directory`; returns pdoc's warnings."""
    import pdoc

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pdoc.pdoc(*API_MODULES, output_directory=output_directory)
    return [str(warning.message) for warning in caught]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m durability.apidocs OUTPUT_DIRECTORY", file=sys.stderr)
        return 2
    problems = build(Path(argv[0]))
    for problem in problems:
        print(f"apidocs: {problem}", file=sys.stderr)
    print(f"API reference in {Path(argv[0]) / 'index.html'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
