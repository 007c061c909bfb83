"""The Temporal UI of the dev server, in headless Debian Chromium driven by Playwright."""

from __future__ import annotations

import asyncio
from pathlib import Path

from playwright.async_api import async_playwright
from temporalio.client import Client

from durability.client import DurabilityClient
from tests.helpers import PROJECT_ROOT, eventually, running_worker

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
SCREENSHOT = PROJECT_ROOT / "docs" / "ui-schedule.png"


async def test_schedule_page_shows_its_summary_and_child_runs(
    client: Client, ui_port: int, task_queue: str, unique: str
) -> None:
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
                await page.goto(url, wait_until="networkidle")
                await page.get_by_text(f"schedule {object_id}").first.wait_for(timeout=20_000)
                await page.get_by_text("ScheduledRun").first.wait_for(timeout=20_000)
                body = await page.inner_text("body")
                Path(SCREENSHOT).parent.mkdir(exist_ok=True)
                await page.screenshot(path=str(SCREENSHOT), full_page=True)
            finally:
                await browser.close()
        assert f"schedule {object_id}" in body
        assert "ScheduledRun" in body
        await durability.cancel_schedule(object_id)
        await asyncio.sleep(0)
        await client.get_workflow_handle(f"schedule:{object_id}").terminate("test done")
