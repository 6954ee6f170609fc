"""ID tokens (lbauth/core/oidc/id_tokens.py; OpenID Connect Core 2 and 3.1.3.6, contract 15) minted
with the key ring of a real process on a SQLite database and verified with PyJWT against the JWKS it
publishes; `at_hash` recomputed here; `id_token_hint`s read back, refused, and matched to a client."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lbauth import errors
from lbauth.core.crypto.keys import Signer, generate_private_key
from lbauth.core.oidc.id_tokens import ID_TOKEN_ALGS, at_hash, hint_is_for, read_hint
from lbauth.services import Services
from tests.conftest import START_TIME, started_services

ACCESS_TOKEN = "lba_at_eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJhc3VfMSJ9.c2lnbmF0dXJl"
ID_TOKEN_TTL = 600  # not the default, to see the setting is what sets `exp`
FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
REFUSED = "id_token_hint is not an ID token this server issued."


@pytest.fixture
def backend() -> str:
    return "sqlite"  # the HTTP tests (tests/test_oidc_claims.py) cover PostgreSQL


@pytest.fixture
async def services(tmp_path: Path, database_url: str) -> AsyncIterator[Services]:
    async with started_services(tmp_path, database_url, id_token_ttl=ID_TOKEN_TTL) as built:
        yield built


async def mint(services: Services, alg: str = "RS256", *, client_id: str = "cid_rp", now: int = START_TIME,
               nonce: str | None = "n-0S6_WzA2Mj", session_id: str | None = "ses_1") -> str:
    return await services.id_tokens.mint(alg=alg, client_id=client_id, asu="asu_1", auth_time=now - 120,
                                         nonce=nonce, session_id=session_id, access_token=ACCESS_TOKEN, now=now)


def published(services: Services, token: str, *, verify_exp: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """(header, claims) of a token whose signature verifies with a key of the published JWKS (the
    frozen clock is in 2030: `exp` is checked only when asked)."""
    header = jwt.get_unverified_header(token)
    keys = {key["kid"]: key for key in services.keyring.jwks["keys"]}
    key = jwt.PyJWK(keys[header["kid"]])
    claims = jwt.decode(token, key, algorithms=[header["alg"]], audience="cid_rp",
                        options={"verify_exp": verify_exp, "verify_iat": False})
    return header, claims


def left_half(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest[: len(digest) // 2]).rstrip(b"=").decode()


def compact(header: dict[str, Any], claims: dict[str, Any], signature: bytes = b"sig") -> str:
    """A JWS put together by hand, to say what a signer of ours never would."""
    return ".".join(base64.urlsafe_b64encode(part).rstrip(b"=").decode() for part in (
        json.dumps(header).encode(), json.dumps(claims).encode(), signature))


# ---- minting -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("alg", "digest"), [("RS256", "sha256"), ("ES256", "sha256"), ("EdDSA", "sha512")])
async def test_an_id_token_carries_every_claim_signed_with_the_apps_algorithm(services, alg, digest):
    token = await mint(services, alg)
    header, claims = published(services, token)
    assert header == {"alg": alg, "kid": services.keyring.signers[alg].kid, "typ": "JWT"}
    assert claims == {"iss": services.settings.issuer, "sub": "asu_1", "aud": "cid_rp", "iat": START_TIME,
                      "exp": START_TIME + ID_TOKEN_TTL, "auth_time": START_TIME - 120,
                      "at_hash": left_half(hashlib.new(digest, ACCESS_TOKEN.encode()).digest()), "amr": ["pwd"],
                      "acr": "urn:lbauth:acr:pwd", "nonce": "n-0S6_WzA2Mj", "sid": "ses_1"}


async def test_nonce_and_sid_appear_only_when_there_are_some(services):
    _, claims = published(services, await mint(services, nonce=None, session_id=None))
    assert "nonce" not in claims and "sid" not in claims
    assert {"iss", "sub", "aud", "iat", "exp", "auth_time", "at_hash", "amr", "acr"} <= set(claims)


async def test_the_first_id_token_of_an_algorithm_makes_its_key_and_publishes_it(services):
    """Contract 8: the first start makes an access key and an RS256 key; an app choosing EdDSA gets
    its key with its first ID token, published in the JWKS, and later tokens reuse it."""
    assert "EdDSA" not in services.keyring.signers
    algs_before = {key["alg"] for key in services.keyring.jwks["keys"]}
    first = jwt.get_unverified_header(await mint(services, "EdDSA"))["kid"]
    assert {key["alg"] for key in services.keyring.jwks["keys"]} == algs_before | {"EdDSA"}
    assert first in {key["kid"] for key in services.keyring.jwks["keys"]}
    assert jwt.get_unverified_header(await mint(services, "EdDSA"))["kid"] == first


@FAST
@given(st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7e), min_size=1, max_size=200),
       st.sampled_from(ID_TOKEN_ALGS))
def test_at_hash_is_the_left_half_of_the_algorithms_digest(access_token, alg):
    """OpenID Connect Core 3.1.3.6: SHA-256 for RS256 and ES256 (22 characters), SHA-512 for EdDSA
    with Ed25519 (43 characters), of the token exactly as issued."""
    digest = (hashlib.sha512 if alg == "EdDSA" else hashlib.sha256)(access_token.encode()).digest()
    assert at_hash(access_token, alg) == left_half(digest)
    assert len(at_hash(access_token, alg)) == (43 if alg == "EdDSA" else 22)


# ---- id_token_hint (OpenID Connect Core 3.1.2.1) -------------------------------------------------------------

@pytest.mark.parametrize("alg", ID_TOKEN_ALGS)
async def test_a_hint_reads_back_as_the_claims_it_was_minted_with(services, alg):
    token = await mint(services, alg)
    assert read_hint(token, services.keyring.public_keys, services.settings.issuer) == published(services, token)[1]


async def test_an_expired_hint_is_still_read(services):
    token = await mint(services, now=1_000_000_000)  # 2001: long expired by any clock
    with pytest.raises(jwt.ExpiredSignatureError):
        published(services, token, verify_exp=True)
    assert read_hint(token, services.keyring.public_keys, services.settings.issuer)["exp"] == 1_000_000_000 + 600


async def test_a_hint_from_another_issuer_is_refused(services):
    token = await mint(services)
    with pytest.raises(errors.ValidationFailed, match=REFUSED):
        read_hint(token, services.keyring.public_keys, "https://other-issuer.example")


async def test_a_hint_not_signed_by_a_published_key_is_refused(services):
    claims = published(services, await mint(services))[1]
    ours = services.keyring.signers["RS256"].kid
    forged = [
        Signer("kid-unknown", "RS256", generate_private_key("RS256")).sign(claims, typ="JWT"),  # unknown kid
        Signer(ours, "RS256", generate_private_key("RS256")).sign(claims, typ="JWT"),  # our kid, another key
        Signer(ours, "ES256", generate_private_key("ES256")).sign(claims, typ="JWT"),  # not the kid's algorithm
        Signer(ours, "HS256", b"k" * 32).sign(claims, typ="JWT"),  # a MAC, not a signature
        compact({"alg": "none", "kid": ours}, claims, b""),
    ]
    for token in forged:
        with pytest.raises(errors.ValidationFailed, match=REFUSED):
            read_hint(token, services.keyring.public_keys, services.settings.issuer)


@pytest.mark.parametrize("change", [{"sub": None}, {"aud": None}, {"iss": None}, {"aud": 7}, {"sub": 5},
                                    {"aud": {"client": "cid_rp"}}])
async def test_a_hint_signed_by_us_without_a_usable_sub_aud_or_iss_is_refused(services, change):
    claims = published(services, await mint(services))[1]
    claims = {k: v for k, v in {**claims, **change}.items() if v is not None}
    token = services.keyring.signers["RS256"].sign(claims, typ="JWT")
    with pytest.raises(errors.ValidationFailed, match=REFUSED):
        read_hint(token, services.keyring.public_keys, services.settings.issuer)


@FAST
@given(st.one_of(
    st.text(max_size=80),
    st.builds(compact, st.fixed_dictionaries({}, optional={
        "alg": st.sampled_from(["RS256", "ES256", "EdDSA", "none", "HS256", ""]),
        "kid": st.one_of(st.text(max_size=8), st.integers(), st.lists(st.text(max_size=4), max_size=2), st.none()),
    }), st.dictionaries(st.sampled_from(["iss", "sub", "aud", "exp"]),
                        st.one_of(st.text(max_size=8), st.integers(), st.none())), st.binary(max_size=64)),
))
def test_anything_else_sent_as_a_hint_is_refused_as_invalid_request(services, hint):
    with pytest.raises(errors.ValidationFailed, match=REFUSED):
        read_hint(hint, services.keyring.public_keys, services.settings.issuer)


@pytest.mark.parametrize(("aud", "meant"), [("cid_rp", True), (["cid_rp"], True), ("cid_other", False),
                                            (["cid_other"], False), (["cid_rp", "cid_other"], False), ([], False),
                                            ("CID_RP", False)])
def test_a_hint_is_for_the_one_client_its_audience_names(aud, meant):
    """Contract 15: the hint's `aud` must be the requesting client, alone."""
    assert hint_is_for({"aud": aud, "sub": "asu_1"}, "cid_rp") is meant


async def test_a_hint_minted_for_one_client_is_not_for_another(services):
    claims = read_hint(await mint(services, client_id="cid_a"), services.keyring.public_keys, services.settings.issuer)
    assert hint_is_for(claims, "cid_a") and not hint_is_for(claims, "cid_b")
