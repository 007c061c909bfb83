"""Payload encryption and the codec server the UI uses to show decrypted payloads."""

from __future__ import annotations

import base64
import json
import os
import threading
import urllib.request
from collections.abc import Iterator

import pytest
from temporalio.api.common.v1 import Payload

from durability.codec import ENCODING, EncryptionCodec, codec_from_env
from durability.codec_server import serve

KEY = os.urandom(32)


def plain_payload(text: str) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(text).encode())


async def test_encode_hides_the_data_and_decode_restores_it_exactly() -> None:
    codec = EncryptionCodec(KEY, "k1")
    original = [plain_payload("acct-42 secret"), plain_payload("other")]
    encoded = await codec.encode(original)
    assert all(p.metadata["encoding"] == ENCODING for p in encoded)
    assert all(b"secret" not in p.data for p in encoded)
    assert encoded[0].data != encoded[1].data
    assert await codec.decode(encoded) == original


async def test_decode_refuses_a_payload_from_another_key_id() -> None:
    encoded = await EncryptionCodec(KEY, "old").encode([plain_payload("x")])
    with pytest.raises(ValueError, match="key id 'old'"):
        await EncryptionCodec(KEY, "new").decode(encoded)


def test_codec_from_env_reads_the_key_and_rejects_bad_ones() -> None:
    assert codec_from_env({}) is None
    codec = codec_from_env({"DURABILITY_ENCRYPTION_KEY": base64.b64encode(KEY).decode()})
    assert codec is not None and codec.key_id == "default"
    with pytest.raises(ValueError, match="must be base64"):
        codec_from_env({"DURABILITY_ENCRYPTION_KEY": "not base64!"})
    with pytest.raises(ValueError, match="32 bytes, got 3"):
        codec_from_env({"DURABILITY_ENCRYPTION_KEY": base64.b64encode(b"abc").decode()})


@pytest.fixture
def codec_server() -> Iterator[str]:
    server = serve(EncryptionCodec(KEY), port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def post(url: str, body: dict[str, object]) -> dict[str, object]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["Access-Control-Allow-Origin"] == "*"
        return json.loads(response.read())  # type: ignore[no-any-return]


def wire(payload: Payload) -> dict[str, object]:
    return {
        "metadata": {k: base64.b64encode(v).decode() for k, v in payload.metadata.items()},
        "data": base64.b64encode(payload.data).decode(),
    }


async def test_codec_server_decodes_what_the_worker_encoded(codec_server: str) -> None:
    encoded = await EncryptionCodec(KEY).encode([plain_payload("shown in the UI")])
    answer = post(f"{codec_server}/decode", {"payloads": [wire(encoded[0])]})
    payloads = answer["payloads"]
    assert isinstance(payloads, list)
    assert base64.b64decode(payloads[0]["data"]) == b'"shown in the UI"'
    assert base64.b64decode(payloads[0]["metadata"]["encoding"]) == b"json/plain"
    round_trip = post(f"{codec_server}/encode", {"payloads": payloads})
    assert isinstance(round_trip["payloads"], list)
    assert base64.b64decode(round_trip["payloads"][0]["metadata"]["encoding"]) == ENCODING
