"""SIGTERM to a worker process that holds runs, outcome deliveries and ledger requests in
flight: it stops taking work (not ready), finishes what it holds within its drain, exits 0
within the grace period the Kubernetes manifests give it, and another worker process
finishes everything else: no run cut, none run twice, every outcome delivered, every
ledger operation resolved with one frozen body."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from durability.client import DurabilityClient
from harness.fleet import FLEET_START_GRACE, WorkerFleet
from harness.recorder import Recorder
from harness.server import free_port
from tests.support.deployment import EXIT_AFTER_DRAIN_SECONDS
from tests.support.helpers import eventually, probe
from tests.support.ledger import intent

DRAIN_SECONDS = 10
# Every call the worker holds takes at most this long: shorter than the drain, so a clean
# drain finishes all of them.
HELD_S = (1.5, 2.5)
OPTIONS = {
    "run_activity": "run_webhook",
    "outcome_activity": "on_outcome_webhook",
    "run_heartbeat_timeout_ms": 5000,
    "outcome_timeout_ms": 10_000,
}
LEDGER_OPTIONS = {
    "concurrency": 3,
    "submit_activity": "http_submit",
    "query_activity": "http_query",
    "retry": {"initial_interval_ms": 200, "maximum_interval_ms": 2_000},
}


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_sigterm_drains_what_the_worker_holds_and_another_worker_finishes_the_rest(
    client: Client, dev_server_address: str, tmp_path: Path
) -> None:
    recorder = Recorder(
        seed=11,
        slow_run_rate=1.0,
        slow_run_s=HELD_S,
        outcome_fail_rate=0.0,
        outcome_sleep_s=HELD_S,
        accepted_rate=0.0,
        ledger_sleep_s=HELD_S,
    )
    recorder.start()
    queue = f"drain-{uuid.uuid4().hex[:8]}"
    health_port = free_port()
    fleets = {
        name: WorkerFleet(
            dev_server_address,
            queue,
            1,
            tmp_path / name,
            {
                "DURABILITY_DRAIN_SECONDS": str(DRAIN_SECONDS),
                "DURABILITY_LEDGER_URL": recorder.base_url,
                "DURABILITY_LOG_LEVEL": "INFO",
                **({"DURABILITY_HEALTH_PORT": str(health_port)} if name == "draining" else {}),
            },
        )
        for name in ("draining", "successor")
    }
    for fleet in fleets.values():
        fleet.directory.mkdir()
    durability = DurabilityClient(client, queue, worker_grace=FLEET_START_GRACE)
    prefix = uuid.uuid4().hex[:6]
    object_ids = [f"drain-{prefix}-{i}" for i in range(3)]
    ledger_id = f"drain-{prefix}-ledger"
    operations = [intent(f"op-{n}", participants=[f"{ledger_id}-c{n}"]) for n in range(12)]
    params = {"url": f"{recorder.base_url}/run", "outcome_url": f"{recorder.base_url}/outcome"}

    def held() -> dict[str, int]:
        """What the far side has in flight now, by kind."""
        with recorder.lock:
            return {
                "runs": sum(
                    1
                    for posts in recorder.runs.values()
                    for post in posts
                    if not post.finished and not post.client_gone
                ),
                "deliveries": recorder.outcomes_in_flight,
                "ledger requests": sum(
                    n for flying in recorder.in_flight.values() for n in flying.values()
                ),
            }

    draining = fleets["draining"]
    try:
        draining.start()  # the only worker: whatever is in flight, it holds

        async def ready() -> bool:
            return (await probe(health_port, "/readyz"))[0] == 200

        await eventually(ready, timeout=60, interval=0.5)
        for object_id in object_ids:
            await durability.set_schedule(object_id, "@every 1s", 1, params=params, options=OPTIONS)
        await eventually(lambda: held()["deliveries"] > 0, timeout=60, interval=0.1)
        await durability.enqueue(ledger_id, operations, options=LEDGER_OPTIONS)

        def all_kinds_held() -> dict[str, int] | None:
            now = held()
            return now if all(now.values()) else None

        in_flight = await eventually(all_kinds_held, timeout=60, interval=0.05)

        process = draining.slots[0].process
        assert process is not None
        process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        fleets["successor"].start()
        # While it drains it is alive but not ready: a rollout does not count it as available.
        seen_draining = False
        while process.poll() is None and not seen_draining:
            status, text = await probe(health_port, "/readyz")
            seen_draining = status == 503 and "draining" in text
            if seen_draining:
                assert (await probe(health_port, "/livez"))[0] in (200, 0)  # 0: just exited
            await asyncio.sleep(0.05)
        # Kubernetes would SIGKILL it after the grace period the manifests derive.
        grace = DRAIN_SECONDS + EXIT_AFTER_DRAIN_SECONDS
        try:
            await asyncio.wait_for(asyncio.to_thread(process.wait), timeout=grace)
        except TimeoutError:
            pytest.fail(f"the worker did not exit within {grace}s of SIGTERM")
        drained_in = time.monotonic() - signalled
        log = draining.log_path(0).read_text()
        assert process.returncode == 0, (process.returncode, log[-3000:])
        assert "shutting down: draining" in log and "worker stopped" in log, log[-3000:]
        assert "Traceback" not in log, log[-3000:]
        assert seen_draining, "readiness never said draining while the worker drained"
        print(
            f"drain: held {in_flight} at SIGTERM; exited 0 after {drained_in:.1f}s "
            f"(DURABILITY_DRAIN_SECONDS={DRAIN_SECONDS}, calls held up to {HELD_S[1]}s)"
        )

        # The successor finishes the rest: ticks go on, and every ledger operation resolves.
        resumed_at = time.time()

        def runs_finished_since(moment: float) -> int:
            with recorder.lock:
                return sum(
                    1
                    for posts in recorder.runs.values()
                    for post in posts
                    if post.finished and post.received_at > moment
                )

        await eventually(lambda: runs_finished_since(resumed_at) >= 3, timeout=60, interval=0.5)
        for object_id in object_ids:
            assert await durability.cancel_schedule(object_id) is True

        async def settled() -> bool:
            runs = await asyncio.gather(*(durability.list_runs(o) for o in object_ids))
            snap = await durability.ledger_handle(ledger_id).query("snapshot")
            resolved = all(op["phase"] == "resolved" for op in snap["operations"])
            return not any(runs) and resolved and len(snap["operations"]) == len(operations)

        await eventually(settled, timeout=90, interval=1.0)
        with recorder.lock:
            # Nothing cut by the drain, nothing run twice, every outcome delivered.
            posts = [post for runs in recorder.runs.values() for post in runs]
            assert not [p.key for p in posts if p.client_gone], "a run was cut mid-flight"
            assert all(len(runs) == 1 for runs in recorder.runs.values())
            assert all(recorder.outcomes[key] for key in recorder.runs)
            # Each request sent with one frozen body, one at a time per canvas.
            assert all(len(bodies) == 1 for bodies in recorder.bodies.values())
            assert recorder.ledger_calls["cut"] == 0
            assert not recorder.bad_keys and not recorder.canvas_overlaps
            assert set(recorder.request_state.values()) == {"applied"}
    finally:
        for fleet in fleets.values():
            await fleet.stop()
        recorder.close()
