"""The benchmark loads the product it measures: a moved class must not make it skip a side."""

from __future__ import annotations

from bench.env import load_product
from durability.registry import all_workflows


def test_the_bench_loads_every_workflow_of_both_capabilities() -> None:
    product = load_product("http://127.0.0.1:9")
    assert product.notes == []
    assert product.schedule and product.ledger
    assert set(product.workflows) == set(all_workflows())
