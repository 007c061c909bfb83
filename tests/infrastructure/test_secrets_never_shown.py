"""No secret in any output: every secret setting, malformed in every way we know of, fed to
`worker.py`, the `durability` CLI and `durability codec-server`; none of its text (nor any
12-character piece of it) in what the process prints. And the codec server's logs never
carry a request's headers, not even the HTTP server's own error log on an oversized header.

No Temporal server is needed: settings are checked before any dial, and the ones that pass
(an API key, TLS material) meet a port nothing listens on.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from durability.codec import EncryptionCodec
from durability.codec_server import CodecServerSettings, start
from tests.support.helpers import PROJECT_ROOT, subprocess_env

WORKER = [sys.executable, str(PROJECT_ROOT / "worker.py")]
NOBODY = "127.0.0.1:1"  # nothing listens: a setting that passes fails to connect
PIECE = 12  # no piece of a secret this long may be printed


def b64(size: int, label: str) -> str:
    """Key-like text, the same in every test process (xdist compares the collected ids)."""
    return base64.b64encode(hashlib.sha512(label.encode()).digest()[:size]).decode()


KEY = b64(32, "key")
OTHER = b64(32, "other")
SHORT = b64(31, "short")
TOKEN = "codec-token-" + b64(24, "token")

KEYS = "DURABILITY_ENCRYPTION_KEYS"
KEY_ID = "DURABILITY_ENCRYPTION_KEY_ID"
SINGLE = "DURABILITY_ENCRYPTION_KEY"

# (id, environment, the secrets in it, what the one error line must say)
KEY_CASES = [
    ("ring-key-before-id", {KEYS: f"{KEY}:primary"}, [KEY], "entry 1"),
    ("ring-second-key-before-id", {KEYS: f"primary:{OTHER},{KEY}:second"}, [KEY, OTHER], "entry 2"),
    ("ring-unpadded-key-before-id", {KEYS: f"{KEY.rstrip('=')}:primary"}, [KEY[:-1]], "entry 1"),
    ("ring-bad-base64", {KEYS: f"primary:{KEY[:-4]}!!!!"}, [KEY[:-4]], "not valid base64"),
    ("ring-wrong-length", {KEYS: f"primary:{SHORT}"}, [SHORT], "31 bytes"),
    ("ring-bare-key", {KEYS: KEY}, [KEY], "not id:base64"),
    ("ring-empty-key", {KEYS: "primary:"}, [], "0 bytes"),
    ("ring-inner-whitespace", {KEYS: f"primary:{KEY[:22]} {KEY[22:]}"}, [KEY[:22]], "entry 1"),
    ("ring-key-as-current", {KEYS: f"primary:{OTHER}", KEY_ID: KEY}, [KEY, OTHER], KEY_ID),
    ("single-bad-base64", {SINGLE: f"{KEY[:-4]}!!!!"}, [KEY[:-4]], "not valid base64"),
    ("single-wrong-length", {SINGLE: SHORT}, [SHORT], "31 bytes"),
    ("single-inner-whitespace", {SINGLE: f"{KEY[:22]}\t{KEY[22:]}"}, [KEY[:22]], SINGLE),
    ("single-key-as-id", {SINGLE: OTHER, KEY_ID: KEY}, [KEY, OTHER], KEY_ID),
    ("id-without-key", {KEY_ID: KEY}, [KEY], KEY_ID),
    ("both-settings", {KEYS: f"primary:{KEY}", SINGLE: OTHER}, [KEY, OTHER], "not both"),
]


def assert_never_shown(output: str, secrets: list[str]) -> None:
    for secret in secrets:
        for start_at in range(max(1, len(secret) - PIECE + 1)):
            piece = secret[start_at : start_at + PIECE]
            assert piece not in output, f"a piece of a secret ({piece!r}) was printed:\n{output}"


def refused_in_one_line(
    result: subprocess.CompletedProcess[str], secrets: list[str], expected: str
) -> None:
    stdout, stderr = result.stdout, result.stderr
    assert result.returncode == 2, stderr
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], stderr
    assert_never_shown(stdout + stderr, secrets)


class Commands:
    """`worker.py` as a process of its own; the `durability` CLI and `durability
    codec-server` in this process (`durability.cli.main`, what the console script runs),
    which is much cheaper: every stream and log record they write is captured."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        self._monkeypatch = monkeypatch
        self._capfd = capfd
        self._caplog = caplog

    @staticmethod
    def environment(env: dict[str, str]) -> dict[str, str]:
        base = {
            name: value
            for name, value in subprocess_env(NOBODY).items()
            if not name.startswith(("DURABILITY_ENCRYPTION_", "DURABILITY_CODEC_", "TEMPORAL_"))
        }
        return {**base, "TEMPORAL_ADDRESS": NOBODY, **env}

    def worker(self, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            WORKER, env=self.environment(env), capture_output=True, text=True, timeout=120
        )

    def cli(self, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        from durability.cli import main

        with self._monkeypatch.context() as patch:
            for name in list(os.environ):
                patch.delenv(name)
            for name, value in self.environment(env).items():
                patch.setenv(name, value)
            self._capfd.readouterr()
            self._caplog.clear()
            with self._caplog.at_level(logging.DEBUG):
                code = main(argv)
            out, err = self._capfd.readouterr()
        return subprocess.CompletedProcess(argv, code, out + self._caplog.text, err)

    def all_three(self, env: dict[str, str]) -> list[subprocess.CompletedProcess[str]]:
        return [
            self.worker(env),
            self.cli(["schedule", "list"], env),
            self.cli(["codec-server", "--port", "0"], {**env, "DURABILITY_CODEC_TOKEN": TOKEN}),
        ]


@pytest.fixture
def commands(
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> Commands:
    return Commands(monkeypatch, capfd, caplog)


@pytest.mark.parametrize(
    ("env", "secrets", "expected"), [c[1:] for c in KEY_CASES], ids=[c[0] for c in KEY_CASES]
)
def test_a_malformed_key_setting_is_never_echoed_by_the_worker_the_cli_or_the_codec_server(
    commands: Commands, env: dict[str, str], secrets: list[str], expected: str
) -> None:
    for result in commands.all_three(env):
        refused_in_one_line(result, [*secrets, TOKEN], expected)
        assert "cannot connect" not in result.stderr  # a key setting, not the connection


CONNECTION_CASES = [
    ("api-key-with-newline", {"TEMPORAL_API_KEY": f"api-{KEY}\n{OTHER}"}, [KEY, OTHER]),
    ("api-key-not-ascii", {"TEMPORAL_API_KEY": f"api-\u00e4-{KEY}"}, [KEY]),
    (
        "tls-key-garbage",
        {"TEMPORAL_TLS_CLIENT_CERT_DATA": "not a certificate", "TEMPORAL_TLS_CLIENT_KEY_DATA": KEY},
        [KEY],
    ),
    ("tls-key-without-cert", {"TEMPORAL_TLS_CLIENT_KEY_DATA": KEY}, [KEY]),
    ("grpc-meta-with-newline", {"TEMPORAL_GRPC_META_AUTHORIZATION": f"Bearer {KEY}\n"}, [KEY]),
]


@pytest.mark.parametrize(
    ("env", "secrets"), [c[1:] for c in CONNECTION_CASES], ids=[c[0] for c in CONNECTION_CASES]
)
def test_malformed_connection_secrets_are_never_echoed_by_the_worker_or_the_cli(
    commands: Commands, env: dict[str, str], secrets: list[str]
) -> None:
    for result in (commands.worker(env), commands.cli(["schedule", "list"], env)):
        assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
        assert_never_shown(result.stdout + result.stderr, secrets)


@pytest.mark.parametrize(
    "line",
    [f'api_key = "{KEY}', f"api_key = {KEY}", f'api_key = "{KEY}" x'],
    ids=["unterminated", "unquoted", "trailing-text"],
)
def test_a_config_file_line_that_does_not_parse_is_never_quoted(
    commands: Commands, tmp_path: Path, line: str
) -> None:
    config = tmp_path / "temporal.toml"
    config.write_text(f'[profile.default]\naddress = "{NOBODY}"\n{line}\n')
    env = {"TEMPORAL_CONFIG_FILE": str(config)}
    for result in (commands.worker(env), commands.cli(["schedule", "list"], env)):
        refused_in_one_line(result, [KEY], "TOML parse error at line 3")


@pytest.mark.parametrize(
    "token", ["short-sekrit", "   ", f"{KEY[:10]}"], ids=["short", "blank", "key-piece"]
)
def test_a_malformed_codec_token_is_never_echoed(
    commands: Commands, token: str, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(token)
    ring = {KEYS: f"primary:{KEY}"}
    from_env = commands.cli(
        ["codec-server", "--port", "0"], {**ring, "DURABILITY_CODEC_TOKEN": token}
    )
    from_file = commands.cli(["codec-server", "--port", "0", "--token-file", str(token_file)], ring)
    for result in (from_env, from_file):
        assert result.returncode == 2, result.stderr
        assert_never_shown(
            result.stdout + result.stderr, [token.strip(), KEY] if token.strip() else [KEY]
        )


def everything_logged(caplog: pytest.LogCaptureFixture) -> str:
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    return "\n".join(formatter.format(record) for record in caplog.records)


async def test_the_codec_server_logs_no_header_of_a_request_it_cannot_parse_or_refuses(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    codec = EncryptionCodec(base64.b64decode(KEY))
    server = await start(codec, CodecServerSettings.build(TOKEN), port=0)
    port = int(server.url.rsplit(":", 1)[1])
    secret = f"Bearer-{OTHER}"
    requests = [
        # An Authorization header over the HTTP server's line limit (8190 bytes).
        b"POST /decode HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + secret.encode() * 200
        + b"\r\n\r\n",
        # A request line over the limit.
        b"POST /decode?" + secret.encode() * 200 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        # A header the parser refuses.
        b"POST /decode HTTP/1.1\r\nHost: x\r\nBad Header " + secret.encode() + b": 1\r\n\r\n",
        # A wrong token, and a refused origin carrying the secret.
        b"POST /decode HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nAuthorization: Bearer "
        + secret.encode()
        + b"\r\n\r\n",
        b"POST /decode HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nOrigin: http://"
        + secret.encode().lower()
        + b"\r\n\r\n",
    ]
    try:
        for request in requests:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(200), 10)
            assert answer.startswith(b"HTTP/1."), answer
            writer.close()
    finally:
        await server.close()
    logged = everything_logged(caplog)
    assert "Error handling request" in logged  # the parse errors are still logged
    assert_never_shown(logged, [secret, secret.lower(), TOKEN])
