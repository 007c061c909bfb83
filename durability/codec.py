"""Optional payload encryption: AES-256-GCM over every payload, keyed from the environment.

Set `DURABILITY_ENCRYPTION_KEY` to a base64-encoded 32-byte key (and optionally
`DURABILITY_ENCRYPTION_KEY_ID`) on every worker and client. Payloads are then stored
encrypted in Temporal's history; the UI shows them through the codec server
(`durability codec-server`), which decodes with the same key.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping, Sequence

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

KEY_ENV = "DURABILITY_ENCRYPTION_KEY"
KEY_ID_ENV = "DURABILITY_ENCRYPTION_KEY_ID"
ENCODING = b"binary/encrypted"
NONCE_BYTES = 12


class EncryptionCodec(PayloadCodec):
    """Encrypts each payload whole (metadata and data) with AES-GCM and a random nonce."""

    def __init__(self, key: bytes, key_id: str = "default") -> None:
        if len(key) != 32:
            raise ValueError(f"{KEY_ENV} must decode to 32 bytes, got {len(key)}")
        self._aead = AESGCM(key)
        self.key_id = key_id

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [
            Payload(
                metadata={"encoding": ENCODING, "encryption-key-id": self.key_id.encode()},
                data=self._encrypt(payload.SerializeToString()),
            )
            for payload in payloads
        ]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        decoded: list[Payload] = []
        for payload in payloads:
            if payload.metadata.get("encoding") != ENCODING:
                decoded.append(payload)
                continue
            key_id = payload.metadata.get("encryption-key-id", b"").decode()
            if key_id != self.key_id:
                raise ValueError(f"payload encrypted with key id {key_id!r}, have {self.key_id!r}")
            decoded.append(Payload.FromString(self._decrypt(payload.data)))
        return decoded

    def _encrypt(self, data: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._aead.encrypt(nonce, data, None)

    def _decrypt(self, data: bytes) -> bytes:
        return self._aead.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], None)


def codec_from_env(env: Mapping[str, str] | None = None) -> EncryptionCodec | None:
    """The codec configured by `DURABILITY_ENCRYPTION_KEY`, or None when it is unset."""
    source = os.environ if env is None else env
    encoded = source.get(KEY_ENV)
    if not encoded:
        return None
    try:
        key = base64.b64decode(encoded, validate=True)
    except binascii.Error as error:
        raise ValueError(f"{KEY_ENV} must be base64, got {encoded[:6]!r}...") from error
    return EncryptionCodec(key, source.get(KEY_ID_ENV, "default"))
