"""One version everywhere: the package (`pyproject.toml`), the contract it implements
(`docs/contract.md`) and the newest entry of `CHANGELOG.md`."""

from __future__ import annotations

import re
import tomllib

from tests.support.helpers import PROJECT_ROOT


def package_version() -> str:
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    version: str = project["version"]
    return version


def contract_version() -> tuple[str, bool]:
    """The version the contract's opening names, and whether it says it is unreleased."""
    text = (PROJECT_ROOT / "docs" / "contract.md").read_text()
    opening = text.split("\n## ", 1)[0]
    match = re.search(r"\bVersion (\d+\.\d+\.\d+)( \(unreleased)?", opening)
    assert match, "docs/contract.md's opening names no 'Version X.Y.Z'"
    return match.group(1), match.group(2) is not None


def changelog_version() -> tuple[str, bool]:
    """The newest CHANGELOG entry's version, and whether it is unreleased."""
    text = (PROJECT_ROOT / "CHANGELOG.md").read_text()
    match = re.search(r"^## (\d+\.\d+\.\d+)( \(unreleased\))?", text, re.MULTILINE)
    assert match, "CHANGELOG.md has no '## X.Y.Z' entry"
    return match.group(1), match.group(2) is not None


def test_pyproject_the_contract_and_the_changelog_name_one_version() -> None:
    changelog, changelog_unreleased = changelog_version()
    contract, contract_unreleased = contract_version()
    assert package_version() == contract == changelog, (
        f"pyproject.toml {package_version()}, docs/contract.md {contract}, CHANGELOG.md {changelog}"
    )
    assert contract_unreleased == changelog_unreleased, (
        "docs/contract.md and CHANGELOG.md disagree on whether the version is released"
    )
