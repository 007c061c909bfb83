"""`durability ledger list` shows the counts per phase a message changed (`skip`, `resume`),
not those of the ledger's last completion: the ledger publishes its status memo after them."""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.client import Client

from tests.support.cold_worker import LedgerActivities
from tests.support.helpers import durability_cli, eventually, running_worker


async def test_ledger_list_counts_follow_skip_and_resume_via_the_cli(
    client: Client, dev_server_address: str, task_queue: str, unique: str, tmp_path: Path
) -> None:
    ledger_id = f"list-counts-{unique}"
    cli = ("--task-queue", task_queue, "--json")
    operations = tmp_path / "ops.json"
    # Both fail to compile: blocked, with no request; nothing else happens to them.
    operations.write_text(
        json.dumps(
            [
                {"id": f"broken-{n}", "operation_type": "shape.update", "participants": [f"c{n}"],
                 "payload": {"compile_error": True}}
                for n in (1, 2)
            ]
        )
    )  # fmt: skip

    async def listed_counts(expected: dict[str, int]) -> dict[str, int] | None:
        found = await durability_cli(dev_server_address, "ledger", "list", "--json")
        [ledger] = [w for w in json.loads(found.stdout) if w["id"] == ledger_id] or [None]
        counts: dict[str, int] | None = ledger and ledger["counts"]
        return counts if counts == expected else None

    acts = LedgerActivities()
    async with running_worker(client, task_queue, acts.all()):
        await durability_cli(
            dev_server_address, *cli, "ledger", "enqueue", ledger_id, "--file", str(operations)
        )
        await eventually(lambda: listed_counts({"blocked": 2}), timeout=30)

        await durability_cli(dev_server_address, *cli, "ledger", "skip", ledger_id, "broken-1")
        await eventually(lambda: listed_counts({"blocked": 1, "resolved": 1}), timeout=30)

        # Held: the resumed operation goes back to pending and stays there (no compile).
        await durability_cli(dev_server_address, *cli, "ledger", "hold", ledger_id)
        await durability_cli(dev_server_address, *cli, "ledger", "resume", ledger_id)
        await eventually(lambda: listed_counts({"pending": 1, "resolved": 1}), timeout=30)
        await client.get_workflow_handle(f"ledger:{ledger_id}").terminate("test done")
