"""Every relative link in README.md and docs/ reaches a file of the repository, and every
`#anchor` a heading of the Markdown file it points into (as GitHub makes anchors)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.support.helpers import PROJECT_ROOT

DOCUMENTS = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").rglob("*.md"))]
# A Markdown link or image, `[text](target)` or `[text](target "title")`.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def prose(markdown: str) -> str:
    """The text outside code blocks and inline code, where links are links."""
    return INLINE_CODE.sub("", FENCE.sub("", markdown))


def github_anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every anchor GitHub gives the document's headings (a repeated one gets `-1`, `-2`, ...)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for match in HEADING.finditer(FENCE.sub("", markdown)):
        anchor = github_anchor(match.group(1))
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


def relative_links(document: Path) -> list[str]:
    """The document's links that point into the repository (no scheme, no `//` host)."""
    return [
        target
        for target in LINK.findall(prose(document.read_text()))
        if not re.match(r"^[a-z][a-z0-9+.-]*:|^//", target, re.IGNORECASE)
    ]


def broken(document: Path, target: str) -> str | None:
    """Why `target`, linked from `document`, does not resolve; None when it does."""
    path_part, _, fragment = target.partition("#")
    resolved = (document.parent / unquote(path_part)).resolve() if path_part else document
    if not resolved.is_relative_to(PROJECT_ROOT):
        return "points outside the repository"
    if not resolved.exists():
        return "no such file"
    if fragment:
        if resolved.suffix != ".md":
            return "an anchor into a file that is not Markdown"
        if unquote(fragment) not in anchors(resolved.read_text()):
            return f"{resolved.relative_to(PROJECT_ROOT)} has no heading with anchor #{fragment}"
    return None


def test_the_anchors_are_githubs() -> None:
    markdown = "# 2.9 Schedule rules\n## In your own worker: `DurabilityPlugin`\n## A b\n## A b\n"
    assert anchors(markdown) == {
        "29-schedule-rules",
        "in-your-own-worker-durabilityplugin",
        "a-b",
        "a-b-1",
    }


def test_links_in_code_are_not_links() -> None:
    assert prose("see `[a](b.md)` and\n```md\n[c](d.md)\n```\n[e](f.md)\n") == (
        "see  and\n\n[e](f.md)\n"
    )


@pytest.mark.parametrize(
    "document", DOCUMENTS, ids=[str(path.relative_to(PROJECT_ROOT)) for path in DOCUMENTS]
)
def test_every_relative_link_resolves_to_a_file_and_heading(document: Path) -> None:
    failures = [
        f"{target}: {reason}"
        for target in relative_links(document)
        if (reason := broken(document, target)) is not None
    ]
    assert not failures, f"{document.relative_to(PROJECT_ROOT)}: " + "; ".join(failures)
