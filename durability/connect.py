"""Connecting to Temporal the same way everywhere: worker, client API, CLI, tests.

Connection settings come from Temporal's environment configuration
(`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, `TEMPORAL_TLS*`,
`TEMPORAL_PROFILE` and the TOML config file), never from hard-coded values.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from temporalio.client import Client, Interceptor, Plugin
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter
from temporalio.envconfig import ClientConfig, ClientConnectConfig
from temporalio.runtime import Runtime
from temporalio.service import TLSConfig

from durability import settings
from durability.settings import ConfigurationError

__all__ = [
    "ConfigurationError",
    "connect",
    "connect_client",
    "data_converter",
    "load_connect_config",
    "task_queue",
]


def task_queue(env: Mapping[str, str] | None = None) -> str:
    """The task queue from `DURABILITY_TASK_QUEUE`, default `durability`."""
    return settings.TASK_QUEUE.read(os.environ if env is None else env)


def data_converter(env: Mapping[str, str] | None = None) -> DataConverter:
    """The pydantic data converter, plus, when encryption is configured
    (`DURABILITY_ENCRYPTION_KEYS`/`_KEY_ID`, see durability/codec.py), the payload codec and
    `EncryptedFailureConverter`, which moves failure messages and stack traces into encoded
    attributes so the codec encrypts them too (docs/security.md). A bad key setting raises
    ConfigurationError naming it."""
    codec = settings.encryption_codec(os.environ if env is None else env)
    if codec is None:
        return pydantic_data_converter
    from durability.codec import EncryptedFailureConverter

    return DataConverter(
        payload_converter_class=pydantic_data_converter.payload_converter_class,
        failure_converter_class=EncryptedFailureConverter,
        payload_codec=codec,
    )


_PROFILE_SETTINGS = ("TEMPORAL_PROFILE", "TEMPORAL_CONFIG_FILE")
# A line of the config file as a TOML parse error quotes it (`3 | api_key = ...`) and the
# marker line under it (`  |   ^^^`).
_QUOTED_LINE = re.compile(r"\s*[0-9]*\s*\|")


def without_quoted_lines(message: str) -> str:
    """An envconfig error without the lines it quotes from the config file: the line that
    failed to parse may hold an API key or a TLS key."""
    kept = [line.strip() for line in message.splitlines() if not _QUOTED_LINE.match(line)]
    return " ".join(line for line in kept if line)


def load_connect_config(env: Mapping[str, str] | None = None) -> ClientConnectConfig:
    """Load envconfig settings from `env` (default: the process environment) and check them
    before any dial: the `TEMPORAL_*` entries of durability.settings, then the address
    wherever it came from (environment or profile)."""
    source = os.environ if env is None else env
    for setting in settings.TEMPORAL_SETTINGS:
        if setting.is_set(source):
            setting.read(source)
    try:
        config = ClientConfig.load_client_connect_config(
            profile=source.get("TEMPORAL_PROFILE") or None,
            override_env_vars=dict(source),
        )
    except Exception as error:  # envconfig raises plain errors for bad files/values
        given = [f"{name} {source[name]!r}" for name in _PROFILE_SETTINGS if source.get(name)]
        raise ConfigurationError(
            f"Temporal environment configuration ({', '.join(given) or 'defaults'}): "
            f"{without_quoted_lines(str(error))}"
        ) from None
    tls = config.get("tls")
    if isinstance(tls, TLSConfig) and bool(tls.client_cert) != bool(tls.client_private_key):
        raise ConfigurationError(
            "TEMPORAL_TLS_CLIENT_CERT_PATH (or _DATA) and TEMPORAL_TLS_CLIENT_KEY_PATH (or "
            "_DATA) go together: set both for mTLS, or neither"
        )
    address = config.get("target_host") or "localhost:7233"
    try:
        settings.host_port(address)
    except ValueError:
        raise ConfigurationError(f"TEMPORAL_ADDRESS must be host:port, got {address!r}") from None
    config["target_host"] = address
    return config


def interceptors() -> list[Interceptor]:
    """OpenTelemetry tracing on every client and worker, and, on every worker, the hosting of
    plugin-hosted schedule runs (`durability.hosting`)."""
    from temporalio.contrib.opentelemetry import TracingInterceptor

    from durability.hosting import RunHostInterceptor

    return [TracingInterceptor(), RunHostInterceptor()]


async def connect_client(
    env: Mapping[str, str] | None = None, *, tracing: bool = True, **overrides: Any
) -> Client:
    """A client to call the product with, not to build workers from: the product's converter
    (the codec when configured) and, when `tracing`, OpenTelemetry's `TracingInterceptor`.
    Lighter than `connect`: it loads neither the workflows nor the activities, nor, without
    `tracing`, OpenTelemetry's interceptor (what `durability` commands wait for first)."""
    config: dict[str, Any] = dict(load_connect_config(env))
    config.update(overrides)
    chosen: list[Interceptor] = []
    if tracing:
        from temporalio.contrib.opentelemetry import TracingInterceptor

        chosen.append(TracingInterceptor())
    converter = data_converter(env)  # a bad key setting is not a connection problem
    try:
        return await Client.connect(**config, data_converter=converter, interceptors=chosen)
    except (RuntimeError, ValueError) as error:
        raise _unreachable(config, error) from error


def _unreachable(config: Mapping[str, Any], error: Exception) -> ConfigurationError:
    tls = " with TLS" if config.get("tls") not in (None, False) else ""
    return ConfigurationError(
        f"cannot connect to Temporal at {config.get('target_host')!r}{tls}: {error}"
    )


async def connect(
    env: Mapping[str, str] | None = None,
    *,
    runtime: Runtime | None = None,
    plugins: Sequence[Plugin] | None = None,
    **overrides: Any,
) -> Client:
    """Connect with envconfig settings and `DurabilityPlugin` (the pydantic converter, the
    codec when configured, tracing; workers made from this client serve the product)."""
    from durability.plugin import DurabilityPlugin

    config: dict[str, Any] = dict(load_connect_config(env))
    config.update(overrides)
    chosen = list(plugins) if plugins is not None else [DurabilityPlugin(env=env)]
    try:
        return await Client.connect(**config, plugins=chosen, runtime=runtime)
    except (RuntimeError, ValueError) as error:
        raise _unreachable(config, error) from error
