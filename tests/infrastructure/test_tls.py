"""TLS, mTLS and API keys through Temporal's environment configuration.

The dev server speaks plaintext only, so a TLS-terminating proxy on 127.0.0.1 (real TLS,
certificates made here) stands in front of it: the client connects with the same
`TEMPORAL_TLS_*` variables a production worker uses.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest

from durability.connect import ConfigurationError, connect, load_connect_config


@dataclass
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _issue(
    name: str, issuer_key: ec.EllipticCurvePrivateKey | None, issuer: x509.Name | None, ca: bool
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer or subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(name), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    certificate = builder.sign(issuer_key or key, hashes.SHA256())
    return certificate, key


def _write(path: Path, certificate: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> Path:
    path.with_suffix(".key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return path


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca_cert, ca_key = _issue("durability-test-ca", None, None, ca=True)
    server_cert, server_key = _issue("temporal.test", ca_key, ca_cert.subject, ca=False)
    client_cert, client_key = _issue("worker.test", ca_key, ca_cert.subject, ca=False)
    _write(tmp_path / "ca.pem", ca_cert, ca_key)
    _write(tmp_path / "server.pem", server_cert, server_key)
    _write(tmp_path / "client.pem", client_cert, client_key)
    return Pki(
        tmp_path / "ca.pem",
        tmp_path / "server.pem",
        tmp_path / "server.key",
        tmp_path / "client.pem",
        tmp_path / "client.key",
    )


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


@pytest.fixture
async def mtls_proxy(pki: Pki, dev_server_address: str) -> AsyncIterator[str]:
    """A TLS endpoint requiring a client certificate from our CA, forwarding to the dev server."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca))
    context.load_cert_chain(pki.server_cert, pki.server_key)
    context.verify_mode = ssl.CERT_REQUIRED
    context.set_alpn_protocols(["h2"])
    upstream_host, upstream_port = dev_server_address.rsplit(":", 1)

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(upstream_host, int(upstream_port))
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(forward, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.close()


def tls_env(address: str, pki: Pki, with_client_cert: bool = True) -> dict[str, str]:
    env = {
        "TEMPORAL_ADDRESS": address,
        "TEMPORAL_NAMESPACE": "default",
        "TEMPORAL_TLS": "true",
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(pki.ca),
        "TEMPORAL_TLS_SERVER_NAME": "temporal.test",
    }
    if with_client_cert:
        env["TEMPORAL_TLS_CLIENT_CERT_PATH"] = str(pki.client_cert)
        env["TEMPORAL_TLS_CLIENT_KEY_PATH"] = str(pki.client_key)
    return env


async def test_mtls_connection_from_envconfig_reaches_the_server(mtls_proxy: str, pki: Pki) -> None:
    client = await connect(tls_env(mtls_proxy, pki))
    system_info = await client.workflow_service.get_system_info(GetSystemInfoRequest())
    assert system_info.server_version


async def test_mtls_without_a_client_certificate_is_refused(mtls_proxy: str, pki: Pki) -> None:
    with pytest.raises(ConfigurationError, match="cannot connect"):
        await connect(tls_env(mtls_proxy, pki, with_client_cert=False))


def test_api_key_and_tls_settings_map_to_the_connection() -> None:
    config = load_connect_config(
        {
            "TEMPORAL_ADDRESS": "my-ns.a1b2c.tmprl.cloud:7233",
            "TEMPORAL_NAMESPACE": "my-ns.a1b2c",
            "TEMPORAL_API_KEY": "secret-key",
        }
    )
    assert config["target_host"] == "my-ns.a1b2c.tmprl.cloud:7233"
    assert config.get("namespace") == "my-ns.a1b2c"
    assert config.get("api_key") == "secret-key"
    assert config.get("tls"), "an API key implies TLS, as Temporal Cloud requires"
