"""The replayer the production workers would be: for replay tests and the cold-tick bench."""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.worker import Replayer

from durability.connect import data_converter
from durability.registry import workflow_runner


def production_replayer(workflows: Sequence[type]) -> Replayer:
    """A replayer configured as worker.py's workers are: converter, tracing, sandbox runner."""
    return Replayer(
        workflows=workflows,
        data_converter=data_converter(),
        # Workers get the tracing interceptor from their client; the replayer has none.
        interceptors=[TracingInterceptor()],
        workflow_runner=workflow_runner(),
    )
