"""A tenant's provider key sealed at rest (worker/proxy/provider_keys.py): opens only where it was sealed."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from worker.proxy.provider_keys import HeldKeys, SealError, key_id, seal, unseal, valid_key

MASTER = b"r" * 32
KEY = "sk-ant-api03-" + "Ab9" * 30 + "QQ"


def test_a_sealed_key_opens_for_its_tenant_and_provider_only() -> None:
    sealed = seal(MASTER, 7, KEY, "anthropic")
    assert (
        KEY not in sealed and "Ab9" not in sealed and sealed != seal(MASTER, 7, KEY, "anthropic")
    )  # fresh nonce
    assert sealed.startswith("v2:") and unseal(MASTER, 7, sealed, "anthropic") == KEY
    with pytest.raises(SealError):
        unseal(MASTER, 8, sealed, "anthropic")  # copied to another tenant's row
    with pytest.raises(SealError):
        unseal(MASTER, 7, sealed, "openai")  # copied to the same tenant's row of another provider
    with pytest.raises(SealError):
        unseal(b"s" * 32, 7, sealed, "anthropic")  # another deployment's key
    flipped = sealed[:-6] + ("A" if sealed[-6] != "A" else "B") + sealed[-5:]
    with pytest.raises(SealError):
        unseal(MASTER, 7, flipped, "anthropic")
    with pytest.raises(SealError):
        unseal(MASTER, 7, "v0:" + sealed[3:], "anthropic")


def test_a_key_sealed_before_the_provider_was_bound_still_opens_for_its_tenant() -> None:
    """A `v1:` value (the tenant's id alone as associated data) opens for its tenant, any provider."""
    nonce = os.urandom(12)
    aead = AESGCM(hmac.new(MASTER, b"compactd.provider-key.v1", hashlib.sha256).digest())
    v1 = (
        "v1:"
        + base64.urlsafe_b64encode(
            nonce + aead.encrypt(nonce, KEY.encode(), b"compactd.provider-key.tenant:7")
        ).decode()
    )
    assert unseal(MASTER, 7, v1, "anthropic") == KEY
    with pytest.raises(SealError):
        unseal(MASTER, 8, v1, "anthropic")
    with pytest.raises(SealError):
        unseal(MASTER, 7, "v2:" + v1[3:], "anthropic")  # relabelled: the provider is bound now


def test_the_key_id_is_keyed_and_shows_nothing_of_the_key() -> None:
    kid = key_id(MASTER, KEY)
    assert len(kid) == 12 and kid == key_id(MASTER, KEY) and kid != key_id(b"s" * 32, KEY)
    assert kid not in KEY


def test_only_header_safe_keys_are_valid() -> None:
    assert valid_key(KEY)
    assert not valid_key("") and not valid_key("a b") and not valid_key("a\n") and not valid_key("x" * 501)


def test_held_keys_are_read_once_per_ttl_and_forgotten_on_demand() -> None:
    reads: list[int] = []
    held = HeldKeys(lambda tenant: reads.append(tenant) or (KEY if tenant == 1 else None), ttl=60)
    assert held.cached(1) == (False, None)
    assert held.get(1) == KEY and held.get(1) == KEY and held.get(2) is None and held.get(2) is None
    assert reads == [1, 2] and held.cached(1) == (True, KEY)
    held.forget(1)
    assert held.get(1) == KEY and reads == [1, 2, 1]
