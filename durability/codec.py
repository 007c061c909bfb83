"""Optional payload encryption: AES-256-GCM over every payload, with a key ring from the
environment so keys can rotate.

    DURABILITY_ENCRYPTION_KEYS    id:base64,id2:base64,...  every key this process may need
    DURABILITY_ENCRYPTION_KEY_ID  the id of the current key (encrypts every new payload)

A payload is decrypted with the ring key its `encryption-key-id` metadata names, so payloads
written under an older key stay readable while that key stays listed. The older single-key
setting `DURABILITY_ENCRYPTION_KEY` (with `DURABILITY_ENCRYPTION_KEY_ID`, default "default")
still works: it is a ring of one key. Set the same ring on every worker, client and codec
server; the UI shows payloads through the codec server (`durability codec-server`).

Format 2 (metadata `encryption-format: 2`, written by this version) binds the key id to the
ciphertext as AES-GCM associated data: a payload whose key id metadata was changed fails to
decrypt. Payloads without `encryption-format` (written before it existed) decrypt without
associated data.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
from collections.abc import Mapping, Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.converter import DefaultFailureConverter, PayloadCodec, PayloadConverter

KEY_ENV = "DURABILITY_ENCRYPTION_KEY"
KEYS_ENV = "DURABILITY_ENCRYPTION_KEYS"
KEY_ID_ENV = "DURABILITY_ENCRYPTION_KEY_ID"
DEFAULT_KEY_ID = "default"
ENCODING = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"
FORMAT_METADATA = "encryption-format"
FORMAT_AAD = b"2"  # the key id is the AES-GCM associated data
NONCE_BYTES = 12
TAG_BYTES = 16
KEY_BYTES = 32
# Ring ids: anything but separators and whitespace (the single-key setting accepts any id).
KEY_ID_PATTERN = re.compile(r"[^\s,:]{1,128}")


class KeyRingError(ValueError):
    """A payload this key ring cannot decrypt; the message names key ids, never data."""


class UnknownKeyError(KeyRingError):
    """A payload names a key id that is not in this process's key ring."""

    def __init__(self, key_id: str, known: Sequence[str]) -> None:
        super().__init__(
            f"payload is encrypted with key id {key_id!r}, which is not in this key ring "
            f"(ids: {', '.join(repr(k) for k in known)}): add {key_id}:<base64 key> to "
            f"{KEYS_ENV} on this worker, client or codec server"
        )
        self.key_id = key_id


class DecryptionError(KeyRingError):
    """A payload could not be decrypted with the key its metadata names."""


class EncryptedFailureConverter(DefaultFailureConverter):
    """Moves every failure's message and stack trace into its encoded attributes, which the
    payload codec encrypts (the SDK's `encode_common_attributes`), so a failure's text, which
    may quote user data (a webhook's URL, a far side's answer), is never stored in clear.

    One exception: a key ring error (a payload this worker cannot decrypt) keeps its message
    in clear. It names key ids only, and the operator must read it where the key is missing:
    a worker's failed workflow task says which key to add without any codec."""

    def __init__(self) -> None:
        super().__init__(encode_common_attributes=True)
        self._plain = DefaultFailureConverter()

    def to_failure(
        self, exception: BaseException, payload_converter: PayloadConverter, failure: Failure
    ) -> None:
        if isinstance(exception, KeyRingError):
            self._plain.to_failure(exception, payload_converter, failure)
        else:
            super().to_failure(exception, payload_converter, failure)


def associated_data(key_id: str) -> bytes:
    """What format 2 binds to the ciphertext: the key id, with a domain prefix."""
    return b"durability-encryption-key-id:" + key_id.encode()


class EncryptionCodec(PayloadCodec):
    """Encrypts each payload whole (metadata and data) with AES-GCM and a random nonce.

    `EncryptionCodec(key, key_id)` is a ring of one key; `EncryptionCodec.ring(keys, current)`
    encrypts with `keys[current]` and decrypts with any key in `keys`."""

    def __init__(self, key: bytes, key_id: str = DEFAULT_KEY_ID) -> None:
        self._keys: dict[str, AESGCM] = {}
        self._digests: dict[str, bytes] = {}
        self._add(key_id, key)
        self.key_id = key_id

    @classmethod
    def ring(cls, keys: Mapping[str, bytes], current: str) -> EncryptionCodec:
        if current not in keys:
            raise ValueError(
                f"current key id {current!r} is not in the ring (ids: {', '.join(map(repr, keys))})"
            )
        codec = cls(keys[current], current)
        for key_id, key in keys.items():
            if key_id != current:
                codec._add(key_id, key)
        return codec

    def _add(self, key_id: str, key: bytes) -> None:
        if not key_id:
            raise ValueError("key id must not be empty")
        if len(key) != KEY_BYTES:
            raise ValueError(f"key {key_id!r} must be {KEY_BYTES} bytes, got {len(key)}")
        self._keys[key_id] = AESGCM(key)
        self._digests[key_id] = hashlib.sha256(key).digest()

    def same_ring(self, other: EncryptionCodec) -> bool:
        """Whether `other` holds the same keys under the same ids and the same current key,
        so each reads and writes what the other does."""
        return (
            self.key_id == other.key_id
            and self._digests.keys() == other._digests.keys()
            and all(hmac.compare_digest(d, other._digests[k]) for k, d in self._digests.items())
        )

    @property
    def key_ids(self) -> list[str]:
        """Every key id in the ring, the current one first."""
        return [self.key_id, *(k for k in self._keys if k != self.key_id)]

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        aead = self._keys[self.key_id]
        aad = associated_data(self.key_id)
        encoded = []
        for payload in payloads:
            nonce = os.urandom(NONCE_BYTES)
            encoded.append(
                Payload(
                    metadata={
                        "encoding": ENCODING,
                        KEY_ID_METADATA: self.key_id.encode(),
                        FORMAT_METADATA: FORMAT_AAD,
                    },
                    data=nonce + aead.encrypt(nonce, payload.SerializeToString(), aad),
                )
            )
        return encoded

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._decode_one(payload) for payload in payloads]

    def _decode_one(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload
        key_id = payload.metadata.get(KEY_ID_METADATA, b"").decode(errors="replace")
        aead = self._keys.get(key_id)
        if aead is None:
            raise UnknownKeyError(key_id, self.key_ids)
        payload_format = payload.metadata.get(FORMAT_METADATA)
        if payload_format == FORMAT_AAD:
            aad: bytes | None = associated_data(key_id)
        elif payload_format is None:
            aad = None  # written before format 2: no associated data
        else:
            raise DecryptionError(
                f"payload has {FORMAT_METADATA} {payload_format!r}, which this version cannot "
                "read (known: 2, or none)"
            )
        data = payload.data
        if len(data) < NONCE_BYTES + TAG_BYTES:
            raise DecryptionError(f"encrypted payload of {len(data)} bytes is too short")
        try:
            plain = aead.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], aad)
        except InvalidTag:
            raise DecryptionError(
                f"payload does not decrypt with key id {key_id!r}: its data or metadata was "
                f"changed, or {key_id!r} names a different key here than where it was written"
            ) from None
        try:
            return Payload.FromString(plain)
        except DecodeError:
            raise DecryptionError(
                f"payload decrypted with key id {key_id!r} is not a Payload message"
            ) from None


def _decode_key(setting: str, entry: str, encoded: str) -> bytes:
    """A 32-byte key from base64; errors name the setting and the entry, never the key."""
    try:
        key = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{setting}{entry}: the key is not valid base64") from None
    if len(key) != KEY_BYTES:
        raise ValueError(
            f"{setting}{entry}: the key decodes to {len(key)} bytes, need {KEY_BYTES} "
            "(AES-256; make one with `head -c32 /dev/urandom | base64`)"
        )
    return key


def looks_like_key(text: str) -> bool:
    """Whether `text` could be a key rather than a key id: base64 (padded or not) of a key's
    32 bytes.

    Key ids are written into every payload's metadata in clear and named in messages, so a
    key written where its id belongs (`key:id`, or the key as DURABILITY_ENCRYPTION_KEY_ID)
    is refused before it can reach either. Hex ids (fingerprints) never decode to 32 bytes
    at their usual lengths (32, 40 or 64 digits)."""
    stripped = text.strip()
    try:
        decoded = base64.b64decode(stripped + "=" * (-len(stripped) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return len(decoded) == KEY_BYTES


def parse_key_ring(text: str) -> dict[str, bytes]:
    """`id:base64,id2:base64,...` as {id: key}; ValueError names the setting, the entry's
    position and what is wrong, never the entry's text (it may hold a key anywhere)."""
    keys: dict[str, bytes] = {}
    positions: dict[str, int] = {}
    for position, raw in enumerate(text.split(","), start=1):
        entry = raw.strip()
        if not entry:
            continue
        key_id, separator, encoded = entry.partition(":")
        key_id = key_id.strip()
        where = f"{KEYS_ENV} entry {position}"
        if not separator:
            raise ValueError(f"{where} is not id:base64 (no ':' found)")
        if not KEY_ID_PATTERN.fullmatch(key_id):
            raise ValueError(
                f"{where}: the key id (before ':') must be 1 to 128 characters without "
                "whitespace, ',' or ':'"
            )
        if looks_like_key(key_id):
            raise ValueError(
                f"{where}: the key id (before ':') looks like a base64 key: write id:base64, "
                "the id first"
            )
        if key_id in keys:
            raise ValueError(
                f"{where}: its key id is the same as entry {positions[key_id]}'s: ids must differ"
            )
        keys[key_id] = _decode_key(KEYS_ENV, f" entry {position}", encoded)
        positions[key_id] = position
    if not keys:
        raise ValueError(f"{KEYS_ENV} is set but lists no keys (expected id:base64,...)")
    return keys


def codec_from_env(env: Mapping[str, str] | None = None) -> EncryptionCodec | None:
    """The codec configured by `DURABILITY_ENCRYPTION_KEYS` (or the single-key
    `DURABILITY_ENCRYPTION_KEY`), or None when neither is set. A ValueError names the
    setting and what is wrong, never a value of these settings (the ids of a ring that
    parsed excepted: they are checked not to look like keys)."""
    source = os.environ if env is None else env
    ring_text = source.get(KEYS_ENV, "")
    single = source.get(KEY_ENV, "")
    current = source.get(KEY_ID_ENV, "")
    if current.strip() and looks_like_key(current):
        raise ValueError(
            f"{KEY_ID_ENV} looks like a base64 key: it takes the id of the current key (the "
            f"text before ':' in its {KEYS_ENV} entry), and is written into every payload"
        )
    if ring_text.strip() and single.strip():
        raise ValueError(
            f"set {KEYS_ENV} or {KEY_ENV}, not both: move the single key into the ring as "
            f"<id>:<base64 key>"
        )
    if single.strip():
        key_id = current or DEFAULT_KEY_ID  # as written by earlier versions: not stripped
        return EncryptionCodec(_decode_key(KEY_ENV, "", single), key_id)
    if not ring_text.strip():
        if current.strip():
            # Without this, a lost key setting would leave payloads in clear unnoticed.
            raise ValueError(f"{KEY_ID_ENV} is set, but neither {KEYS_ENV} nor {KEY_ENV} is")
        return None
    keys = parse_key_ring(ring_text)
    current = current.strip()
    if not current:
        if len(keys) > 1:
            raise ValueError(
                f"{KEY_ID_ENV} must name the current key, one of {', '.join(map(repr, keys))}"
            )
        current = next(iter(keys))
    if current not in keys:
        raise ValueError(
            f"{KEY_ID_ENV} names no key in {KEYS_ENV}: set it to one of its ids "
            f"({', '.join(map(repr, keys))})"
        )
    return EncryptionCodec.ring(keys, current)
