"""Product metrics on a real worker's `/metrics`, scraped by a real Prometheus that evaluates the
alert rules shipped in `deploy/prometheus/`. `promtool` checks the rules and
runs their unit tests (`deploy/prometheus/alerts.test.yml`).

Prometheus is Debian's `prometheus` package (`.ci/run` installs it). Without it these tests skip,
unless `DURABILITY_REQUIRE_PROMETHEUS=1` (CI) makes its absence a failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from durability.client import DurabilityClient
from harness.fleet import WorkerFleet
from harness.http import QuietHandler
from harness.server import free_port
from tests.support.helpers import PROJECT_ROOT, eventually, http_server

RULES = PROJECT_ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = PROJECT_ROOT / "deploy" / "prometheus" / "alerts.test.yml"


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        if os.environ.get("DURABILITY_REQUIRE_PROMETHEUS") == "1":
            pytest.fail(f"{name} is not installed (Debian package `prometheus`)")
        pytest.skip(f"{name} is not installed (Debian package `prometheus`)")
    return found


def test_promtool_checks_the_rules_and_their_unit_tests() -> None:
    promtool = tool("promtool")
    checked = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(
        [promtool, "test", "rules", str(RULE_TESTS)],
        capture_output=True,
        text=True,
        check=False,
        cwd=RULE_TESTS.parent,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


class FarSide(QuietHandler):
    """Runs succeed; every outcome delivery fails (so outcomes are dead-lettered); a ledger
    submit answers `blocked` (so requests block), except one marked `reconcile-me`, which is
    applied and then refused by the completion webhook."""

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length)
        if self.path.startswith("/outcome"):
            self._answer(500, {"error": "receiver down"})
        elif self.path.startswith("/api/requests") and b"reconcile-me" in body:
            self._answer(200, {"outcome": "applied"})
        elif self.path.startswith("/api/requests"):
            self._answer(403, {"error": "token expired"})
        elif self.path.startswith("/api/complete"):
            self._answer(200, {"blocked": True, "error": "receipt mismatch"})
        else:
            self._answer(200, {})

    def do_GET(self) -> None:
        self._answer(403, {"error": "token expired"})

    def _answer(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def value(exposition: str, name: str, **labels: str) -> float:
    """The sum of the samples of `name` whose labels include `labels`."""
    total = 0.0
    for line in exposition.splitlines():
        match = re.match(rf"^{name}(\{{(?P<labels>[^}}]*)\}})? (?P<value>\S+)$", line)
        if match is None:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group("labels") or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(match.group("value"))
    return total


def start_prometheus(directory: Path, target_port: int) -> tuple[subprocess.Popen[bytes], int]:
    """Prometheus scraping the worker every second and evaluating the shipped rules."""
    binary = tool("prometheus")
    port = free_port()
    config = directory / "prometheus.yml"
    shutil.copy(RULES, directory / "alerts.yml")
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "rule_files: [alerts.yml]\n"
        "scrape_configs:\n"
        "  - job_name: durability-worker\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{target_port}']}}]\n"
    )
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=(directory / "prometheus.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    return process, port


def api(port: int, path: str) -> Any:
    """`/api/v1/<path>`'s `data` from the Prometheus on `port`."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/{path}", timeout=5) as response:
        return json.loads(response.read())["data"]


def firing(port: int) -> set[str]:
    """The names of the alerts firing now."""
    alerts = api(port, "alerts")["alerts"]
    return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}


async def test_a_real_prometheus_scrapes_product_metrics_and_fires_the_alerts(
    client: Client, dev_server_address: str, task_queue: str, unique: str, tmp_path: Path
) -> None:
    tool("prometheus")
    metrics_port = free_port()
    with http_server(FarSide) as far_side:
        fleet = WorkerFleet(
            dev_server_address,
            task_queue,
            1,
            tmp_path,
            env={
                "DURABILITY_METRICS_PORT": str(metrics_port),
                "DURABILITY_LEDGER_URL": f"{far_side}/api/",
                "DURABILITY_WEBHOOK_ALLOWED_URLS": f"{far_side}/",
                # Every workflow task replays the history first: nothing may be counted twice.
                "DURABILITY_MAX_CACHED_WORKFLOWS": "0",
            },
        )
        fleet.start()
        prometheus, prometheus_port = start_prometheus(tmp_path, metrics_port)
        try:
            durability = DurabilityClient(client, task_queue)
            object_id, ledger_id = f"metrics-{unique}", f"metrics-{unique}"
            await durability.set_schedule(
                object_id,
                "@every 1s",
                1,
                params={"url": f"{far_side}/run", "outcome_url": f"{far_side}/outcome"},
                options={
                    "run_activity": "run_webhook",
                    "outcome_activity": "on_outcome_webhook",
                    "outcome_retries": {"max_attempts": 2, "initial_interval_ms": 100},
                    "overlap": "skip",
                    "max_concurrent_runs": 1,
                },
            )
            await durability.enqueue(
                ledger_id,
                [{"id": "op-1", "operation_type": "t", "participants": ["c1"]}],
                options={"submit_activity": "http_submit", "query_activity": "http_query"},
            )
            await durability.enqueue(
                f"{ledger_id}-c",
                [{"id": "op-1", "operation_type": "t", "participants": ["c1"],
                  "payload": {"note": "reconcile-me"}}],
                options={"submit_activity": "http_submit", "query_activity": "http_query",
                         "complete_activity": "http_complete"},
            )  # fmt: skip

            def seen() -> str | None:
                exposition = scrape(metrics_port)
                wanted = [
                    value(exposition, "durability_runs_started") >= 2,
                    value(exposition, "durability_runs_settled", outcome="complete") >= 2,
                    value(exposition, "durability_outcome_deliveries", result="retried") >= 2,
                    value(exposition, "durability_outcome_deliveries", result="dead_lettered") >= 2,
                    value(exposition, "durability_run_start_lateness_count") >= 2,
                    # worker.py's buckets (workflows/metrics.py), past the SDK's 10 s default.
                    value(exposition, "durability_run_start_lateness_bucket", le="30000") >= 2,
                    value(exposition, "durability_ledger_operations", phase="dispatched") >= 1,
                    value(exposition, "durability_request_attempts", answer="blocked") >= 1,
                    value(exposition, "durability_requests_blocked", reason="far_side") >= 2,
                    value(exposition, "durability_completion_refusals", kind="refused") >= 1,
                ]
                return exposition if all(wanted) else None

            exposition = await eventually(lambda: asyncio.to_thread(seen), timeout=60)
            # Labels stay in a small fixed set: no object or ledger ID in any series.
            assert object_id not in exposition and ledger_id not in exposition
            # Counted once each, though every task of every run replayed its history first.
            runs = (
                "WorkflowType = 'ScheduledRun' AND "
                f"WorkflowId STARTS_WITH 'schedule-run:{object_id}:'"
            )

            async def counted_once() -> bool:
                """Never more than the runs started; as many once the last start is counted
                (a run is visible as started before its worker's task counts it)."""
                before = (await client.count_workflows(runs)).count
                exposition = await asyncio.to_thread(scrape, metrics_port)
                counted = value(exposition, "durability_runs_started")
                after = (await client.count_workflows(runs)).count
                assert counted <= after, (before, counted, after)
                return before <= counted

            await eventually(counted_once, timeout=30)
            expected = {"DurabilityOutcomesDeadLettered", "DurabilityRequestsBlocked"}

            def fired() -> bool:
                return expected <= firing(prometheus_port)

            try:
                await eventually(lambda: asyncio.to_thread(fired), timeout=60)
            except AssertionError:
                raise AssertionError(
                    f"firing: {firing(prometheus_port)}; targets: {api(prometheus_port, 'targets')}"
                ) from None
        finally:
            prometheus.terminate()
            prometheus.wait(timeout=10)
            await fleet.stop()
