"""A tenant's provider key, held by compactd: sealed at rest, never logged, read back only to call the upstream.

Sealed with AES-256-GCM under a key derived from the deployment's redaction key (HMAC, its own
label: never the redaction key itself), a random 96-bit nonce per seal, and the tenant's id and
the provider as associated data, so a sealed value copied to another tenant's row, or to the same
tenant's row of another provider, does not open. What is stored is `v2:` + base64url(nonce +
ciphertext + tag); `v1:` values (sealed before the provider was bound: the tenant's id alone) still
open and are sealed as `v2:` the next time the key is set. What is shown is a key id (a keyed
hash's first 12 hex digits), never the key or any part of it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import threading
import time
from collections.abc import Callable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

_VERSION = "v2:"
_V1 = "v1:"
_NONCE = 12
MAX_KEY_CHARS = 500


class SealError(Exception):
    """A sealed value that does not open (another deployment's key, another tenant's row, tampered)."""


def _derived(master: bytes, label: bytes) -> bytes:
    return hmac.new(master, label, hashlib.sha256).digest()


def _aad(tenant_id: int, provider: str | None) -> bytes:
    """The associated data: the tenant's id, and the provider (None: a `v1:` value's, without it)."""
    bound = f"compactd.provider-key.tenant:{tenant_id}"
    return (bound if provider is None else f"{bound}.provider:{provider}").encode()


def seal(master: bytes, tenant_id: int, key: str, provider: str) -> str:
    nonce = os.urandom(_NONCE)
    sealed = AESGCM(_derived(master, b"compactd.provider-key.v1")).encrypt(
        nonce, key.encode(), _aad(tenant_id, provider)
    )
    return _VERSION + base64.urlsafe_b64encode(nonce + sealed).decode()


def unseal(master: bytes, tenant_id: int, value: str, provider: str) -> str:
    if value.startswith(_VERSION):
        aad = _aad(tenant_id, provider)
    elif value.startswith(_V1):
        aad = _aad(tenant_id, None)  # sealed before the provider was bound
    else:
        raise SealError("unknown sealed-value version")
    try:
        raw = base64.urlsafe_b64decode(value[len(_VERSION) :])
        plain = AESGCM(_derived(master, b"compactd.provider-key.v1")).decrypt(raw[:_NONCE], raw[_NONCE:], aad)
    except (InvalidTag, ValueError):
        raise SealError("the sealed provider key does not open with this deployment's key") from None
    return plain.decode()


def key_id(master: bytes, key: str) -> str:
    """A public id of a provider key (to tell which one is set): keyed, so it confirms no guess."""
    return hmac.new(
        _derived(master, b"compactd.provider-key-id.v1"), key.encode(), hashlib.sha256
    ).hexdigest()[:12]


def valid_key(key: str) -> bool:
    """A provider key as an HTTP header value can carry it: printable ASCII, no spaces, bounded."""
    return 0 < len(key) <= MAX_KEY_CHARS and all(33 <= ord(c) < 127 for c in key)


class HeldKeys:
    """Each tenant's provider key as this API process last read it, for `ttl` seconds (a key set
    or cleared by another process is seen within that time; one set through this process's API at
    once). `read(tenant_id)` is the store read + unseal; None: the tenant holds no key."""

    def __init__(self, read: Callable[[int], str | None], ttl: float = 10.0) -> None:
        self._read = read
        self._ttl = ttl
        self._entries: dict[int, tuple[float, str | None]] = {}
        self._lock = threading.Lock()

    def cached(self, tenant_id: int) -> tuple[bool, str | None]:
        """(found, key): found False when the tenant's entry is missing or expired."""
        with self._lock:
            entry = self._entries.get(tenant_id)
        if entry is None or entry[0] < time.monotonic():
            return False, None
        return True, entry[1]

    def get(self, tenant_id: int) -> str | None:
        found, key = self.cached(tenant_id)
        if found:
            return key
        key = self._read(tenant_id)
        with self._lock:
            self._entries[tenant_id] = (time.monotonic() + self._ttl, key)
        return key

    def forget(self, tenant_id: int) -> None:
        with self._lock:
            self._entries.pop(tenant_id, None)
