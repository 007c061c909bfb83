"""Payload encryption with a key ring, and the codec server the UI and CLI decode through."""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import os
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from durability.codec import (
    ENCODING,
    DecryptionError,
    EncryptionCodec,
    UnknownKeyError,
    codec_from_env,
)
from durability.codec_server import CodecServerSettings, origins_from, start
from durability.serving import RunningServer
from tests.support.helpers import PROJECT_ROOT

KEY = os.urandom(32)
KEY_A = os.urandom(32)
KEY_B = os.urandom(32)
TOKEN = "t0k3n-" + base64.urlsafe_b64encode(os.urandom(24)).decode()
UI = "http://localhost:8233"


def b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def plain_payload(text: str) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(text).encode())


def old_format(key: bytes, key_id: str, payload: Payload) -> Payload:
    """A payload exactly as the codec wrote it before key rings (no associated data)."""
    nonce = os.urandom(12)
    return Payload(
        metadata={"encoding": ENCODING, "encryption-key-id": key_id.encode()},
        data=nonce + AESGCM(key).encrypt(nonce, payload.SerializeToString(), None),
    )


def with_key_id(payload: Payload, key_id: str) -> Payload:
    changed = Payload()
    changed.CopyFrom(payload)
    changed.metadata["encryption-key-id"] = key_id.encode()
    return changed


# -- the codec and its key ring ---------------------------------------------------------


async def test_encode_hides_the_data_and_decode_restores_it_exactly() -> None:
    codec = EncryptionCodec(KEY, "k1")
    original = [plain_payload("acct-42 secret"), plain_payload("other")]
    encoded = await codec.encode(original)
    assert all(p.metadata["encoding"] == ENCODING for p in encoded)
    assert all(p.metadata["encryption-format"] == b"2" for p in encoded)
    assert all(b"secret" not in p.data for p in encoded)
    assert encoded[0].data != encoded[1].data
    assert await codec.decode(encoded) == original
    unencrypted = plain_payload("passes through")
    assert await codec.decode([unencrypted]) == [unencrypted]


async def test_a_ring_encrypts_with_the_current_key_and_decrypts_with_any_listed_key() -> None:
    ring = EncryptionCodec.ring({"A": KEY_A, "B": KEY_B}, current="B")
    encoded = await ring.encode([plain_payload("new")])
    assert encoded[0].metadata["encryption-key-id"] == b"B"
    # Written under B: a process that has only B reads it, one with only A cannot.
    assert await EncryptionCodec(KEY_B, "B").decode(encoded) == [plain_payload("new")]
    with pytest.raises(UnknownKeyError, match="'B'"):
        await EncryptionCodec(KEY_A, "A").decode(encoded)
    # Written under A before the switch: the ring still reads it.
    written_under_a = await EncryptionCodec(KEY_A, "A").encode([plain_payload("old")])
    assert await ring.decode(written_under_a) == [plain_payload("old")]


async def test_a_key_id_missing_from_the_ring_is_named_with_the_setting_to_add_it_to() -> None:
    encoded = await EncryptionCodec(KEY_A, "A").encode([plain_payload("x")])
    with pytest.raises(UnknownKeyError) as raised:
        await EncryptionCodec(KEY_B, "B").decode(encoded)
    message = str(raised.value)
    assert "key id 'A'" in message and "DURABILITY_ENCRYPTION_KEYS" in message
    assert "A:<base64 key>" in message and "'B'" in message
    assert raised.value.key_id == "A"
    assert isinstance(raised.value, ValueError)  # a workflow task failure, retried: not fatal


async def test_swapping_key_id_metadata_between_payloads_of_two_keys_fails_to_decrypt() -> None:
    ring = EncryptionCodec.ring({"A": KEY_A, "B": KEY_B}, current="A")
    [under_a] = await ring.encode([plain_payload("a")])
    [under_b] = await EncryptionCodec.ring({"A": KEY_A, "B": KEY_B}, current="B").encode(
        [plain_payload("b")]
    )
    for swapped, named in ((with_key_id(under_a, "B"), "B"), (with_key_id(under_b, "A"), "A")):
        with pytest.raises(DecryptionError, match=f"key id '{named}'"):
            await ring.decode([swapped])


async def test_the_key_id_is_bound_to_the_ciphertext_as_associated_data() -> None:
    """Two ids for one key (a renamed or copied key): only the associated data tells them
    apart, so relabelling a payload's key id must fail."""
    ring = EncryptionCodec.ring({"A": KEY, "A2": KEY}, current="A")
    [payload] = await ring.encode([plain_payload("bound")])
    assert await ring.decode([payload]) == [plain_payload("bound")]
    with pytest.raises(DecryptionError, match="does not decrypt with key id 'A2'"):
        await ring.decode([with_key_id(payload, "A2")])


async def test_stripping_the_format_marker_does_not_downgrade_to_no_associated_data() -> None:
    codec = EncryptionCodec(KEY, "k")
    [payload] = await codec.encode([plain_payload("x")])
    del payload.metadata["encryption-format"]
    with pytest.raises(DecryptionError):
        await codec.decode([payload])
    payload.metadata["encryption-format"] = b"9"
    with pytest.raises(DecryptionError, match="encryption-format b'9'"):
        await codec.decode([payload])


async def test_payloads_written_before_the_format_marker_still_decrypt() -> None:
    old = old_format(KEY_A, "old", plain_payload("from an earlier version"))
    single = codec_from_env(
        {"DURABILITY_ENCRYPTION_KEY": b64(KEY_A), "DURABILITY_ENCRYPTION_KEY_ID": "old"}
    )
    ring = codec_from_env(
        {
            "DURABILITY_ENCRYPTION_KEYS": f"old:{b64(KEY_A)},new:{b64(KEY_B)}",
            "DURABILITY_ENCRYPTION_KEY_ID": "new",
        }
    )
    assert single is not None and ring is not None
    for codec in (single, ring):
        assert await codec.decode([old]) == [plain_payload("from an earlier version")]
    tampered = Payload()
    tampered.CopyFrom(old)
    tampered.data = tampered.data[:-1] + bytes([tampered.data[-1] ^ 1])
    with pytest.raises(DecryptionError, match="key id 'old'"):
        await ring.decode([tampered])


def test_codec_from_env_reads_a_ring_or_the_single_key() -> None:
    assert codec_from_env({}) is None
    single = codec_from_env({"DURABILITY_ENCRYPTION_KEY": b64(KEY)})
    assert single is not None and single.key_id == "default" and single.key_ids == ["default"]
    ring = codec_from_env(
        {
            "DURABILITY_ENCRYPTION_KEYS": f" A:{b64(KEY_A)} ,\n B:{b64(KEY_B)}, ",
            "DURABILITY_ENCRYPTION_KEY_ID": "B",
        }
    )
    assert ring is not None and ring.key_id == "B" and ring.key_ids == ["B", "A"]
    only = codec_from_env({"DURABILITY_ENCRYPTION_KEYS": f"A:{b64(KEY_A)}"})
    assert only is not None and only.key_id == "A"
    # Hex fingerprints as ids are not taken for keys (only base64 of 32 bytes is).
    fingerprints = {"a" * 32: KEY_A, "b" * 40: KEY_B, "c" * 64: KEY}
    ring_text = ",".join(f"{key_id}:{b64(key)}" for key_id, key in fingerprints.items())
    hex_ids = codec_from_env({"DURABILITY_ENCRYPTION_KEYS": ring_text, KEY_ID: "c" * 64})
    assert hex_ids is not None and sorted(hex_ids.key_ids) == sorted(fingerprints)


KEYS = "DURABILITY_ENCRYPTION_KEYS"
KEY_ID = "DURABILITY_ENCRYPTION_KEY_ID"
SHORT = b64(os.urandom(31))


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({KEYS: "A:!!not-base64!!"}, "DURABILITY_ENCRYPTION_KEYS entry 1: the key is not"),
        ({KEYS: f"A:{b64(KEY_A)},B:{SHORT}", KEY_ID: "A"}, "entry 2: the key decodes to 31"),
        (
            {KEYS: f"A:{b64(KEY_A)},A:{b64(KEY_B)}", KEY_ID: "A"},
            "entry 2: its key id is the same as entry 1's",
        ),
        (
            {KEYS: f"A:{b64(KEY_A)},B:{b64(KEY_B)}", KEY_ID: "C"},
            "DURABILITY_ENCRYPTION_KEY_ID names no key in DURABILITY_ENCRYPTION_KEYS: set it to "
            "one of its ids ('A', 'B')",
        ),
        ({KEYS: f"A:{b64(KEY_A)},B:{b64(KEY_B)}"}, "KEY_ID must name the current key"),
        ({KEYS: b64(KEY_A)}, "DURABILITY_ENCRYPTION_KEYS entry 1 is not id:base64"),
        ({KEYS: f"a b:{b64(KEY_A)}"}, "entry 1: the key id (before ':') must be"),
        ({KEYS: f"{b64(KEY_A)}:A"}, "entry 1: the key id (before ':') looks like a base64 key"),
        (
            {KEYS: f"A:{b64(KEY_A)}", KEY_ID: b64(KEY_B)},
            "DURABILITY_ENCRYPTION_KEY_ID looks like a base64 key",
        ),
        ({KEYS: " , "}, "lists no keys"),
        ({KEYS: f"A:{b64(KEY_A)}", "DURABILITY_ENCRYPTION_KEY": b64(KEY_B)}, "not both"),
        ({"DURABILITY_ENCRYPTION_KEY": "not base64!"}, "DURABILITY_ENCRYPTION_KEY: the key is not"),
        ({"DURABILITY_ENCRYPTION_KEY": SHORT}, "decodes to 31 bytes, need 32"),
    ],
    ids=[
        "bad-base64",
        "wrong-length",
        "duplicate-id",
        "current-not-in-ring",
        "current-unset",
        "no-id",
        "bad-id",
        "key-before-id",
        "key-as-current-id",
        "empty",
        "both-settings",
        "single-bad-base64",
        "single-wrong-length",
    ],
)
def test_bad_key_settings_name_the_setting_and_entry_but_never_the_key(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError) as raised:
        codec_from_env(env)
    assert message in str(raised.value)
    for secret in (b64(KEY_A), b64(KEY_B), SHORT, "not-base64"):
        assert secret not in str(raised.value)


# -- the codec server -------------------------------------------------------------------


class CountingCodec(PayloadCodec):
    """The real codec, counting how often the server used it."""

    def __init__(self, inner: EncryptionCodec) -> None:
        self.inner = inner
        self.calls = 0

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        self.calls += 1
        return await self.inner.encode(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        self.calls += 1
        return await self.inner.decode(payloads)


def wire(payload: Payload) -> dict[str, object]:
    return {
        "metadata": {k: base64.b64encode(v).decode() for k, v in payload.metadata.items()},
        "data": base64.b64encode(payload.data).decode(),
    }


def unwire(answer: dict[str, Any]) -> list[Payload]:
    return [
        Payload(
            metadata={k: base64.b64decode(v) for k, v in p.get("metadata", {}).items()},
            data=base64.b64decode(p.get("data", "")),
        )
        for p in answer.get("payloads", [])
    ]


async def encrypted_body(text: str, codec: EncryptionCodec | None = None) -> dict[str, Any]:
    encoded = await (codec or EncryptionCodec(KEY)).encode([plain_payload(text)])
    return {"payloads": [wire(p) for p in encoded]}


@pytest.fixture
async def counting() -> CountingCodec:
    return CountingCodec(EncryptionCodec(KEY))


async def running(codec: PayloadCodec, **settings: Any) -> RunningServer:
    return await start(codec, CodecServerSettings.build(**settings), port=0)


@pytest.fixture
async def server(counting: CountingCodec) -> AsyncIterator[str]:
    started = await running(counting, token=TOKEN)
    try:
        yield started.url
    finally:
        await started.close()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as session:
        yield session


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_decode_without_a_token_or_with_a_wrong_one_is_401_and_decodes_nothing(
    server: str, http: aiohttp.ClientSession, counting: CountingCodec
) -> None:
    body = await encrypted_body("secret")
    for headers in ({}, bearer("wrong-token-of-some-length"), {"Authorization": f"Basic {TOKEN}"}):
        async with http.post(f"{server}/decode", json=body, headers=headers) as response:
            assert response.status == 401
            assert "bearer token" in (await response.json())["error"]
            assert response.headers["WWW-Authenticate"].startswith("Bearer")
            assert "secret" not in await response.text()
    assert counting.calls == 0


async def test_the_right_token_decodes(
    server: str, http: aiohttp.ClientSession, counting: CountingCodec
) -> None:
    body = await encrypted_body("shown in the UI")
    async with http.post(f"{server}/decode", json=body, headers=bearer()) as response:
        assert response.status == 200
        assert unwire(await response.json()) == [plain_payload("shown in the UI")]
    # Only the last path segment counts (a server mounted under a prefix).
    async with http.post(f"{server}/ns/default/decode", json=body, headers=bearer()) as response:
        assert response.status == 200
    assert counting.calls == 2


async def test_the_token_is_compared_in_constant_time(
    server: str, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return bool(real(a, b))

    monkeypatch.setattr(hmac, "compare_digest", spy)
    async with http.post(f"{server}/decode", json={"payloads": []}, headers=bearer()) as response:
        assert response.status == 200
    assert compared == [(TOKEN.encode(), TOKEN.encode())]


async def test_a_payload_under_an_unknown_key_is_400_naming_the_key(
    server: str, http: aiohttp.ClientSession
) -> None:
    body = await encrypted_body("x", EncryptionCodec(KEY_A, "retired"))
    async with http.post(f"{server}/decode", json=body, headers=bearer()) as response:
        assert response.status == 400
        error = (await response.json())["error"]
    assert "key id 'retired'" in error and "DURABILITY_ENCRYPTION_KEYS" in error
    async with http.post(f"{server}/decode", data=b"{nope", headers=bearer()) as response:
        assert response.status == 400


async def test_encode_is_404_unless_enabled(
    server: str, http: aiohttp.ClientSession, counting: CountingCodec
) -> None:
    body = {"payloads": [wire(plain_payload("minted"))]}
    async with http.post(f"{server}/encode", json=body, headers=bearer()) as response:
        assert response.status == 404
        assert "--enable-encode" in (await response.json())["error"]
    async with http.post(f"{server}/encode", json=body) as response:
        assert response.status == 401  # the token is checked first
    assert counting.calls == 0
    enabled = await running(counting, token=TOKEN, enable_encode=True)
    try:
        async with http.post(f"{enabled.url}/encode", json=body, headers=bearer()) as response:
            assert response.status == 200
            [encoded] = unwire(await response.json())
        assert encoded.metadata["encoding"] == ENCODING
        assert await counting.inner.decode([encoded]) == [plain_payload("minted")]
    finally:
        await enabled.close()


async def test_preflight_answers_allowed_origins_only_and_needs_no_token(
    server: str, http: aiohttp.ClientSession
) -> None:
    preflight = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,x-namespace,authorization",
    }
    async with http.options(f"{server}/decode", headers={**preflight, "Origin": UI}) as response:
        assert response.status == 204
        assert response.headers["Access-Control-Allow-Origin"] == UI
        assert response.headers["Access-Control-Allow-Credentials"] == "true"
        assert response.headers["Access-Control-Allow-Headers"] == (
            "Content-Type, X-Namespace, Authorization"
        )
        assert response.headers["Vary"] == "Origin"
    other = {**preflight, "Origin": "https://evil.example"}
    async with http.options(f"{server}/decode", headers=other) as response:
        assert response.status == 403
        assert not [h for h in response.headers if h.lower().startswith("access-control-")]


async def test_post_from_an_allowed_origin_gets_cors_headers_and_from_another_a_403(
    server: str, http: aiohttp.ClientSession, counting: CountingCodec
) -> None:
    body = await encrypted_body("x")
    async with http.post(
        f"{server}/decode", json=body, headers={**bearer(), "Origin": UI}
    ) as response:
        assert response.status == 200
        assert response.headers["Access-Control-Allow-Origin"] == UI
    # The UI can read why it was refused.
    async with http.post(f"{server}/decode", json=body, headers={"Origin": UI}) as response:
        assert response.status == 401
        assert response.headers["Access-Control-Allow-Origin"] == UI
    async with http.post(
        f"{server}/decode", json=body, headers={**bearer(), "Origin": "https://evil.example"}
    ) as response:
        assert response.status == 403
        assert "Access-Control-Allow-Origin" not in response.headers
    assert counting.calls == 1


async def test_a_body_over_the_limit_is_413(
    http: aiohttp.ClientSession, counting: CountingCodec
) -> None:
    small = await running(counting, token=TOKEN, max_body_bytes=1024)
    try:
        async with http.post(f"{small.url}/decode", data=b"x" * 1025, headers=bearer()) as response:
            assert response.status == 413
            assert "1024 bytes" in (await response.json())["error"]

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as read
            for _ in range(3):
                yield b"y" * 512

        async with http.post(f"{small.url}/decode", data=chunks(), headers=bearer()) as response:
            assert response.status == 413
    finally:
        await small.close()
    assert counting.calls == 0
    assert CodecServerSettings.build(TOKEN).max_body_bytes == 4 * 1024 * 1024


def test_origin_and_token_settings_are_checked() -> None:
    assert origins_from(None, None) == ["http://localhost:8233", "http://127.0.0.1:8233"]
    assert origins_from(None, " https://a.example, https://b.example:8443 ") == [
        "https://a.example",
        "https://b.example:8443",
    ]
    assert origins_from(["https://flag.example"], "https://env.example") == ["https://flag.example"]
    built = CodecServerSettings.build(TOKEN, ["https://UI.example/"])
    assert built.allowed_origins == {"https://ui.example"}
    for bad in ("*", "null", "https://ui.example/path", "ui.example"):
        with pytest.raises(ValueError, match="scheme://host"):
            CodecServerSettings.build(TOKEN, [bad])
    with pytest.raises(ValueError, match="at least 16 characters"):
        CodecServerSettings.build("short")


# -- `durability codec-server` ----------------------------------------------------------


def cli_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DURABILITY_ENCRYPTION_", "DURABILITY_CODEC_"))
    }
    env.update(PYTHONUNBUFFERED="1", **extra)
    return env


async def run_cli(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "durability.cli", "codec-server", "--port", "0", *args,
        env=env, cwd=PROJECT_ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
    return process.returncode or 0, stdout.decode(), stderr.decode()


class ServerProcess:
    def __init__(self, process: asyncio.subprocess.Process, url: str) -> None:
        self.process = process
        self.url = url


async def serve_cli(*args: str, env: dict[str, str]) -> ServerProcess:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "durability.cli", "codec-server", "--port", "0", *args,
        env=env, cwd=PROJECT_ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
    assert line.startswith("codec server on http://127.0.0.1:"), line
    return ServerProcess(process, line.split()[-1])


async def stop(server: ServerProcess) -> str:
    server.process.terminate()
    _, stderr = await asyncio.wait_for(server.process.communicate(), 20)
    assert server.process.returncode == 0  # SIGTERM stops it cleanly
    return stderr.decode()


async def test_the_command_refuses_to_start_without_a_token_or_the_insecure_flag() -> None:
    env = cli_env(DURABILITY_ENCRYPTION_KEYS=f"A:{b64(KEY_A)}")
    code, _, stderr = await run_cli(env=env)
    assert code == 2
    assert "no codec token: set DURABILITY_CODEC_TOKEN or pass --token-file" in stderr
    assert "--insecure-no-auth" in stderr
    code, _, stderr = await run_cli(
        "--insecure-no-auth", env={**env, "DURABILITY_CODEC_TOKEN": TOKEN}
    )
    assert code == 2 and "contradict" in stderr
    code, _, stderr = await run_cli("--token-file", "/does/not/exist", env=env)
    assert code == 2 and "--token-file /does/not/exist" in stderr
    code, _, stderr = await run_cli(env=cli_env(DURABILITY_CODEC_TOKEN=TOKEN))
    assert code == 2 and "DURABILITY_ENCRYPTION_KEY is not set" in stderr


async def test_the_command_with_insecure_no_auth_serves_without_a_token_and_warns(
    http: aiohttp.ClientSession,
) -> None:
    server = await serve_cli("--insecure-no-auth", env=cli_env(DURABILITY_ENCRYPTION_KEY=b64(KEY)))
    try:
        body = await encrypted_body("local only")
        async with http.post(f"{server.url}/decode", json=body) as response:
            assert response.status == 200
            assert unwire(await response.json()) == [plain_payload("local only")]
    finally:
        stderr = await stop(server)
    assert "WARNING: --insecure-no-auth" in stderr


async def test_the_command_takes_its_token_file_origins_encode_flag_and_key_ring(
    http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    token_file = tmp_path / "codec-token"
    token_file.write_text(TOKEN + "\n")
    ui = "https://temporal.example.com"
    server = await serve_cli(
        "--token-file", str(token_file), "--allow-origin", ui, "--enable-encode",
        env=cli_env(
            DURABILITY_CODEC_TOKEN="ignored-when-a-file-is-given",
            DURABILITY_ENCRYPTION_KEYS=f"A:{b64(KEY_A)},B:{b64(KEY_B)}",
            DURABILITY_ENCRYPTION_KEY_ID="B",
        ),
    )  # fmt: skip
    try:
        ring = EncryptionCodec.ring({"A": KEY_A, "B": KEY_B}, "A")
        old = await encrypted_body("under A", ring)
        async with http.post(f"{server.url}/decode", json=old, headers=bearer()) as response:
            assert response.status == 200
            assert unwire(await response.json()) == [plain_payload("under A")]
        async with http.post(f"{server.url}/decode", json=old) as response:
            assert response.status == 401
        body = {"payloads": [wire(plain_payload("new"))]}
        async with http.post(
            f"{server.url}/encode", json=body, headers={**bearer(), "Origin": ui}
        ) as response:
            assert response.status == 200
            assert response.headers["Access-Control-Allow-Origin"] == ui
            [encoded] = unwire(await response.json())
        assert encoded.metadata["encryption-key-id"] == b"B"
        # --allow-origin replaces the default dev UI origins.
        async with http.options(
            f"{server.url}/decode", headers={"Origin": UI, "Access-Control-Request-Method": "POST"}
        ) as response:
            assert "Access-Control-Allow-Origin" not in response.headers
    finally:
        await stop(server)
