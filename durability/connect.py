"""Connecting to Temporal the same way everywhere: worker, client API, CLI, tests.

Connection settings come from Temporal's environment configuration
(`TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, `TEMPORAL_TLS*`,
`TEMPORAL_PROFILE` and the TOML config file), never from hard-coded values.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from temporalio.client import Client, Interceptor, Plugin
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter
from temporalio.envconfig import ClientConfig, ClientConnectConfig
from temporalio.runtime import Runtime

from durability import DEFAULT_TASK_QUEUE, TASK_QUEUE_ENV


class ConfigurationError(Exception):
    """A setting is wrong; the message names it and its value."""


def task_queue(env: Mapping[str, str] | None = None) -> str:
    """The task queue from `DURABILITY_TASK_QUEUE`, default `durability`."""
    value = (os.environ if env is None else env).get(TASK_QUEUE_ENV, DEFAULT_TASK_QUEUE)
    if not value.strip():
        raise ConfigurationError(f"{TASK_QUEUE_ENV} must not be empty, got {value!r}")
    return value


def data_converter(env: Mapping[str, str] | None = None) -> DataConverter:
    """The pydantic data converter, plus the payload codec when encryption is configured
    (`DURABILITY_ENCRYPTION_KEYS`/`_KEY_ID`, see durability/codec.py)."""
    from durability.codec import codec_from_env

    codec = codec_from_env(env)
    if codec is None:
        return pydantic_data_converter
    return DataConverter(
        payload_converter_class=pydantic_data_converter.payload_converter_class,
        payload_codec=codec,
    )


def load_connect_config(env: Mapping[str, str] | None = None) -> ClientConnectConfig:
    """Load envconfig settings and check the address before any dial."""
    try:
        config = ClientConfig.load_client_connect_config(
            profile=(os.environ if env is None else env).get("TEMPORAL_PROFILE"),
            override_env_vars=env,
        )
    except Exception as error:  # envconfig raises plain errors for bad files/values
        raise ConfigurationError(f"Temporal environment configuration: {error}") from error
    address = config.get("target_host") or "localhost:7233"
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigurationError(f"TEMPORAL_ADDRESS must be host:port, got {address!r}")
    config["target_host"] = address
    return config


def interceptors() -> list[Interceptor]:
    """OpenTelemetry tracing on every client and worker."""
    return [TracingInterceptor()]


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
    try:
        return await Client.connect(
            **config,
            plugins=list(plugins) if plugins is not None else [DurabilityPlugin()],
            runtime=runtime,
        )
    except RuntimeError as error:
        raise ConfigurationError(
            f"cannot connect to Temporal at {config.get('target_host')!r}: {error}"
        ) from error
