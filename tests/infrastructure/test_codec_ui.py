"""The Temporal UI decoding encrypted payloads through `durability.codec_server`, in headless
Chromium: its own dev server started with `--ui-codec-endpoint` pointing at the codec server.

The UI sends `Authorization: Bearer <token>` to a codec server only as "pass access token",
which forwards the signed-in user's OIDC access token, over https only; the dev server's UI
has no sign-in and no flag for a static token. In production an authenticating proxy in
front of the UI and codec server adds the header. Here the browser context adds it the same
way (`extra_http_headers`: sent by the browser on the UI's own fetches, unlike `page.route`,
whose interception answers CORS preflights itself), so the UI's real fetch, the browser's
real CORS preflight against the allowed origin, and the server's token check all take part.
"""

from __future__ import annotations

import base64
import os
import uuid

from playwright.async_api import Browser, Page, Response, async_playwright
from temporalio.api.enums.v1 import EventType

from durability.client import DurabilityClient
from durability.codec import EncryptionCodec
from durability.codec_server import CodecServerSettings, start
from durability.connect import data_converter, interceptors
from durability.devserver import TIMER_SHIFT_ARGS
from harness.server import free_port
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, body_containing
from tests.support.helpers import eventually, running_worker, start_dev_server

KEY = os.urandom(32)
TOKEN = base64.urlsafe_b64encode(os.urandom(24)).decode()
COULD_NOT_CONNECT = "Codec Server could not connect"


async def open_run(
    browser: Browser, url: str, headers: dict[str, str]
) -> tuple[Page, list[int], list[str]]:
    """A fresh browser context on `url`; the statuses of its /decode answers and the
    /decode requests that failed (e.g. refused by CORS)."""
    context = await browser.new_context(
        viewport={"width": 1400, "height": 1000}, extra_http_headers=headers
    )
    page = await context.new_page()
    statuses: list[int] = []
    failed: list[str] = []

    def answered(response: Response) -> None:
        if "/decode" in response.url:
            statuses.append(response.status)

    page.on("response", answered)
    page.on("requestfailed", lambda r: failed.append(r.url) if "/decode" in r.url else None)
    await page.goto(url, wait_until="domcontentloaded")
    return page, statuses, failed


async def test_the_ui_shows_encrypted_params_only_with_the_token_from_an_allowed_origin() -> None:
    ui_port = free_port()
    ui_origin = f"http://127.0.0.1:{ui_port}"
    codec_server = await start(
        EncryptionCodec(KEY, "k1"), CodecServerSettings.build(TOKEN, [ui_origin]), port=0
    )
    env = await start_dev_server(
        ui=True,
        ui_port=ui_port,
        data_converter=data_converter(
            {"DURABILITY_ENCRYPTION_KEYS": f"k1:{base64.b64encode(KEY).decode()}"}
        ),
        interceptors=interceptors(),
        dev_server_extra_args=[*TIMER_SHIFT_ARGS, "--ui-codec-endpoint", codec_server.url],
    )
    try:
        client = env.client
        task_queue = f"tq-{uuid.uuid4().hex[:12]}"
        object_id = f"ui-codec-{uuid.uuid4().hex[:8]}"
        marker = f"codec-marker-{uuid.uuid4().hex[:12]}"
        durability = DurabilityClient(client, task_queue)
        async with running_worker(client, task_queue):
            await durability.set_schedule(object_id, "@every 1h", 1, params={"marker": marker})
            await durability.trigger_schedule(object_id)

            async def run_started() -> str | None:
                handle = client.get_workflow_handle(f"schedule:{object_id}")
                async for event in handle.fetch_history_events():
                    if event.HasField("start_child_workflow_execution_initiated_event_attributes"):
                        started = event.start_child_workflow_execution_initiated_event_attributes
                        return started.workflow_id
                return None

            run_id: str = await eventually(run_started, timeout=20)
            await client.get_workflow_handle(run_id).result()
        # The run's input carries the params, stored encrypted.
        first = await anext(aiter(client.get_workflow_handle(run_id).fetch_history_events()))
        assert first.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED
        assert marker.encode() not in first.SerializeToString()

        path = f"/namespaces/default/workflows/{run_id}"
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                with_token = {"Authorization": f"Bearer {TOKEN}"}
                page, statuses, _ = await open_run(browser, ui_origin + path, with_token)
                shown = await body_containing(page, marker)
                assert "ScheduledRun" in shown and COULD_NOT_CONNECT not in shown
                assert statuses and set(statuses) == {200}, statuses

                page, statuses, _ = await open_run(browser, ui_origin + path, {})
                refused = await body_containing(page, COULD_NOT_CONNECT)
                await eventually(lambda: 401 in statuses, timeout=10)
                assert 200 not in statuses, statuses
                assert marker not in refused
                assert marker not in await body_containing(page, "ScheduledRun")

                # The same UI under another origin (not allowed), even with the token: the
                # browser's preflight is refused, so no decode answer reaches the page.
                other = f"http://localhost:{ui_port}{path}"
                page, statuses, failed = await open_run(browser, other, with_token)
                refused = await body_containing(page, COULD_NOT_CONNECT)
                await eventually(lambda: failed, timeout=10)
                assert statuses == [], statuses
                assert marker not in refused
            finally:
                await browser.close()
        await client.get_workflow_handle(f"schedule:{object_id}").terminate("test done")
    finally:
        await env.shutdown()
        await codec_server.close()
