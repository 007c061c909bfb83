"""A user's own one-file worker: their workflow defined in the module that imports
`DurabilityPlugin`, under the SDK's default sandboxed runner (which re-imports that module for
every run), with the plugin on the client or on the Worker, with encryption on and off."""

from __future__ import annotations

import asyncio
import base64
import os
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from tests.support.helpers import run_command, subprocess_env

USER_WORKER = textwrap.dedent(
    """
    import asyncio
    import os
    import sys

    from temporalio import workflow
    from temporalio.client import Client
    from temporalio.worker import Worker

    from durability.connect import data_converter
    from durability.plugin import DurabilityPlugin


    @workflow.defn
    class Hello:
        @workflow.run
        async def run(self, name: str) -> str:
            return f"hello {name}"


    async def main(where: str, queue: str) -> None:
        address = os.environ["TEMPORAL_ADDRESS"]
        if where == "client":
            client = await Client.connect(address, plugins=[DurabilityPlugin()])
            plugins = []
        else:
            client = await Client.connect(address, data_converter=data_converter())
            plugins = [DurabilityPlugin()]
        async with Worker(client, task_queue=queue, workflows=[Hello], plugins=plugins):
            result = await client.execute_workflow(
                Hello.run, "you", id=f"hello-{queue}", task_queue=queue
            )
        print(result, flush=True)
        os._exit(0)  # sdk-python#300, as worker.py does


    if __name__ == "__main__":
        asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


@pytest.mark.parametrize("where", ["client", "worker"])
async def test_a_users_one_file_worker_with_the_plugin_runs_its_own_workflow(
    tmp_path: Path, dev_server_address: str, where: str
) -> None:
    module = tmp_path / "user_worker.py"
    module.write_text(USER_WORKER)
    key = base64.b64encode(os.urandom(32)).decode()

    async def run(encrypted: bool) -> str:
        extra = {"DURABILITY_ENCRYPTION_KEYS": f"A:{key}"} if encrypted else {}
        queue = f"user-{uuid.uuid4().hex[:12]}"
        done = await run_command(
            [sys.executable, str(module), where, queue],
            env=subprocess_env(dev_server_address, **extra),
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.strip()

    assert list(await asyncio.gather(run(False), run(True))) == ["hello you", "hello you"]
