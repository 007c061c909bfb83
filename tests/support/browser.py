"""The headless Chromium the UI tests drive, and what they wait for on a page."""

from __future__ import annotations

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page

from tests.support.helpers import eventually

CHROMIUM = "/usr/bin/chromium"


CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


async def body_containing(page: Page, text: str) -> str:
    """The page's visible text once it contains `text` (the UI renders asynchronously).

    Summaries are rendered as markdown inside iframes, so every frame's text counts."""

    async def body() -> str | None:
        texts = []
        for frame in page.frames:
            try:
                texts.append(await frame.inner_text("body", timeout=2000))
            except PlaywrightError:
                continue
        content = "\n".join(texts)
        return content if text in content else None

    found: str = await eventually(body, timeout=20, interval=0.5)
    return found
