"""Traces leave the process: the worker and the CLI export OTLP/HTTP to a real receiver on
127.0.0.1 when the standard OTEL_* variables say so, and one run's spans form one trace
from the client call through the schedule and the run to the activity."""

from __future__ import annotations

import gzip
import sys
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from durability.connect import ConfigurationError
from durability.tracing import exporter_name
from harness.http import QuietHandler
from tests.support.helpers import (
    eventually,
    run_command,
    start_worker_process,
    stop_worker,
    subprocess_env,
)


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str


class OtlpReceiver:
    """An OTLP/HTTP trace receiver (`POST /v1/traces`, protobuf) that keeps every span."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.lock = threading.Lock()

    def receive(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        with self.lock:
            for resource_spans in request.resource_spans:
                service = next(
                    (
                        a.value.string_value
                        for a in resource_spans.resource.attributes
                        if a.key == "service.name"
                    ),
                    "",
                )
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self.spans.append(
                            ReceivedSpan(
                                service,
                                span.name,
                                span.trace_id.hex(),
                                span.span_id.hex(),
                                span.parent_span_id.hex(),
                            )
                        )

    def snapshot(self) -> list[ReceivedSpan]:
        with self.lock:
            return list(self.spans)


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, OtlpReceiver]]:
    receiver = OtlpReceiver()

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            encoding = self.headers.get("Content-Encoding", "")
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            receiver.receive(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", receiver
    finally:
        server.shutdown()
        server.server_close()


def _chain(spans: list[ReceivedSpan], leaf: ReceivedSpan) -> list[ReceivedSpan]:
    """`leaf` and its ancestors up to the trace's root, root first."""
    by_id = {span.span_id: span for span in spans}
    chain = [leaf]
    while chain[-1].parent_span_id and chain[-1].parent_span_id in by_id:
        chain.append(by_id[chain[-1].parent_span_id])
    return list(reversed(chain))


async def test_one_runs_spans_reach_an_otlp_receiver_linked_from_the_client_call(
    dev_server_address: str, task_queue: str, unique: str
) -> None:
    object_id = f"traced-{unique}"
    with otlp_receiver() as (endpoint, receiver):
        otel = {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        }
        worker = await start_worker_process(
            dev_server_address, task_queue, DURABILITY_DRAIN_SECONDS="5", **otel
        )
        try:
            cli_env = subprocess_env(
                dev_server_address, OTEL_SERVICE_NAME="tracing-test-cli", **otel
            )
            for command in (
                ("schedule", "set", object_id, "0 0 1 1 *", "--version", "1"),
                ("schedule", "trigger", object_id),
            ):
                await run_command(
                    [sys.executable, "-m", "durability.cli", *command, "--task-queue", task_queue],
                    env=cli_env,
                )

            def run_activity() -> ReceivedSpan | None:
                return next((s for s in receiver.snapshot() if s.name == "RunActivity:run"), None)

            leaf = await eventually(run_activity, timeout=30)
        finally:
            code, output = await stop_worker(worker)
        assert code == 0, output[-2000:]
        spans = receiver.snapshot()

    chain = _chain(spans, leaf)
    names = [span.name for span in chain]
    # From the CLI's update-with-start through the schedule and its run to the activity.
    assert chain[0].service == "tracing-test-cli", chain
    assert {span.service for span in chain[1:]} == {"durability-worker"}, chain
    # The SDK's interceptor makes workflow spans for what a workflow starts (no span for a
    # whole run of a workflow that lives for years), each parented to the caller's span.
    assert names == [
        "StartUpdateWithStartWorkflow:DurabilitySchedule",
        "StartChildWorkflow:ScheduledRun",
        "StartActivity:run",
        "RunActivity:run",
    ], names
    assert len({span.trace_id for span in chain}) == 1
    # The schedule's lifecycle events are spans of the same trace.
    lifecycle = {s.name for s in spans if s.trace_id == leaf.trace_id}
    assert "durability.scheduled_run.settled" in lifecycle, sorted(lifecycle)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        ({"OTEL_TRACES_EXPORTER": "none"}, None),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, "otlp"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, "otlp"),
        ({"OTEL_TRACES_EXPORTER": "console"}, "console"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, None),
    ],
)
def test_tracing_is_off_unless_the_environment_asks_for_an_exporter(
    env: dict[str, str], expected: str | None
) -> None:
    assert exporter_name(env) == expected


def test_an_unknown_exporter_is_refused_naming_the_setting() -> None:
    with pytest.raises(ConfigurationError, match=r"OTEL_TRACES_EXPORTER.*'zipkin'"):
        exporter_name({"OTEL_TRACES_EXPORTER": "zipkin"})
