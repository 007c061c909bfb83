"""The Temporal UI of the dev server, in headless Debian Chromium driven by Playwright."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page, async_playwright
from temporalio.client import Client

from durability.client import DurabilityClient
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, body_containing
from tests.support.helpers import PROJECT_ROOT, eventually, running_worker

# The committed screenshot is refreshed only on request, so a test run leaves the tree clean:
#   DURABILITY_UPDATE_SCREENSHOT=1 make pytest
DOCS_SCREENSHOT = PROJECT_ROOT / "docs" / "ui-schedule.png"


async def test_schedule_page_shows_its_summary_and_child_runs(
    client: Client, ui_port: int, task_queue: str, unique: str, tmp_path: Path
) -> None:
    update_docs = os.environ.get("DURABILITY_UPDATE_SCREENSHOT") == "1"
    screenshot = DOCS_SCREENSHOT if update_docs else tmp_path / "ui-schedule.png"
    object_id = f"ui-{unique}"
    durability = DurabilityClient(client, task_queue)
    async with running_worker(client, task_queue):
        await durability.set_schedule(object_id, "@every 1s", version=1)

        async def children_started() -> bool:
            runs = 0
            async for event in client.get_workflow_handle(
                f"schedule:{object_id}"
            ).fetch_history_events():
                runs += event.HasField("child_workflow_execution_started_event_attributes")
            return runs >= 2

        await eventually(children_started, timeout=30)
        url = f"http://127.0.0.1:{ui_port}/namespaces/default/workflows/schedule:{object_id}"
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page(viewport={"width": 1400, "height": 1000})
                await page.goto(url, wait_until="domcontentloaded")
                # Children appear in the timeline under their static summaries.
                timeline = await body_containing(page, f"of {object_id}")
                await page.screenshot(path=str(screenshot))
                await page.get_by_text("User Metadata").first.click()
                metadata = await body_containing(page, f"schedule {object_id}")
                details = await body_containing(page, "Next tick:")
                await page.get_by_text("Relationships").first.click()
                relationships = await body_containing(page, f"schedule-run:{object_id}:")
            finally:
                await browser.close()
        assert "DurabilitySchedule" in timeline
        assert re.search(rf"run \d{{4}}-\d\d-\d\dT[\d:.]+\+00:00 of {object_id}", timeline)
        assert f"schedule {object_id}" in metadata
        assert "@every 1s" in details and "version 1" in details
        assert f"schedule-run:{object_id}:" in relationships
        await durability.cancel_schedule(object_id)
        await asyncio.sleep(0)
        await client.get_workflow_handle(f"schedule:{object_id}").terminate("test done")


DOCS_DESCRIBE_SCREENSHOT = PROJECT_ROOT / "docs" / "ui-schedule-describe.png"


async def test_schedule_page_shows_its_last_runs_and_next_fire_times(
    client: Client, ui_port: int, task_queue: str, unique: str, tmp_path: Path
) -> None:
    """The workflow page's User Metadata shows the current details: the last runs that ended
    and the next fire times (docs/ui-schedule-describe.png)."""
    update_docs = os.environ.get("DURABILITY_UPDATE_SCREENSHOT") == "1"
    screenshot = DOCS_DESCRIBE_SCREENSHOT if update_docs else tmp_path / "ui-describe.png"
    object_id = f"ui-describe-{unique}"
    durability = DurabilityClient(client, task_queue)
    async with running_worker(client, task_queue):
        await durability.set_schedule(object_id, "@every 1s", version=1)

        async def three_ended() -> bool:
            described = await durability.describe(object_id)
            return len(described["recent_runs"]) >= 3

        await eventually(three_ended, timeout=30)
        url = f"http://127.0.0.1:{ui_port}/namespaces/default/workflows/schedule:{object_id}"
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page(viewport={"width": 1400, "height": 1000})
                await page.goto(url, wait_until="domcontentloaded")
                await body_containing(page, f"of {object_id}")
                await page.get_by_text("User Metadata").first.click()
                details = await body_containing(page, "Last runs (newest first):")
                details = await body_containing(page, "Next fire times:")
                await _scroll_to_frame_with(page, "Last runs (newest first):")
                await page.screenshot(path=str(screenshot))
            finally:
                await browser.close()
        assert re.search(r"\d{4}-\d\d-\d\dT[\d:.]+\+00:00: complete, (delivered|pending)", details)
        assert re.search(r"Next fire times: \d{4}-\d\d-\d\dT[\d:.]+\+00:00, ", details)
        assert screenshot.stat().st_size > 10_000
        await client.get_workflow_handle(f"schedule:{object_id}").terminate("test done")


async def _scroll_to_frame_with(page: Page, text: str) -> None:
    """Scroll the markdown frame that shows `text` into view (the details render in one)."""
    for frame in page.frames:
        try:
            if text in await frame.inner_text("body", timeout=2000):
                element = await frame.frame_element()
                await element.scroll_into_view_if_needed()
                return
        except PlaywrightError:
            continue
