"""DPoP (RFC 9449) in lbauth.verify: the proof check (signature, `typ`, `alg`, the key in the header,
`htm`, `htu`, `iat`, `ath`, `jkt`, `jti`), the replay cache, `Verifier.verify(..., dpop=...)` and
`requires_token` with `Authorization: DPoP`, and the RFC 9449 7.1 challenges.

The keys are made here with cryptography and the proofs signed with PyJWT; their JWKs, thumbprints
(RFC 7638) and `ath` values are written here from the keys' numbers, not taken from lbauth."""

from __future__ import annotations

import hashlib
import json
import secrets
import threading

import jwt
import pytest
import tornado.web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.httputil import HTTPHeaders

from lbauth.verify import (
    DPOP_ALGS,
    DPoPError,
    DPoPRequest,
    ReplayCache,
    TokenError,
    access_token_hash,
    check_proof,
    jwk_thumbprint,
    normalize_htu,
    requires_token,
)
from lbauth.verify.tornado import presented_token
from tests import test_verify
from tests.support import unverified_claims
from tests.test_verify import PASSWORD, WEAK, b64, claims_of, forge, resource_service, sign

verifier = test_verify.verifier  # the fixture: a Verifier of the test's lbauth server, refreshed once

EC_KEY = ec.generate_private_key(ec.SECP256R1())
OTHER_EC_KEY = ec.generate_private_key(ec.SECP256R1())
ED_KEY = ed25519.Ed25519PrivateKey.generate()
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
SIGNERS = [("ES256", EC_KEY), ("EdDSA", ED_KEY), ("RS256", RSA_KEY)]

NOW = 1_900_000_000
URL = "https://api.example.com/notes"
TOKEN = "lba_at_eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ1c3JfMSJ9.c2ln"  # checked here only as `ath`'s input
ALGS = 'algs="ES256 EdDSA RS256"'
INVALID_PROOF = "oauth2.dpop.invalid_proof"
# RFC 7638 3.1: the example RSA key (RFC 7517 A.1) and its thumbprint.
RFC_7638_KEY = {
    "kty": "RSA",
    "n": "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3o"
         "knjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6"
         "qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJ"
         "zKnqDKgw",
    "e": "AQAB", "alg": "RS256", "kid": "2011-04-29",
}
RFC_7638_THUMBPRINT = "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"


def unsigned_int(value: int, length: int | None = None) -> str:
    """RFC 7518 2 Base64urlUInt: big-endian, in the fewest octets (or exactly `length`)."""
    return b64(value.to_bytes(length or (value.bit_length() + 7) // 8, "big"))


def public_jwk(private_key) -> dict:
    """The public JWK of a key, from its numbers: RFC 7518 6.2.1 (EC), 6.3.1 (RSA), RFC 8037 2 (OKP)."""
    public = private_key.public_key()
    if isinstance(public, ec.EllipticCurvePublicKey):
        numbers = public.public_numbers()
        return {"kty": "EC", "crv": "P-256", "x": unsigned_int(numbers.x, 32), "y": unsigned_int(numbers.y, 32)}
    if isinstance(public, ed25519.Ed25519PublicKey):
        raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return {"kty": "OKP", "crv": "Ed25519", "x": b64(raw)}
    numbers = public.public_numbers()
    return {"kty": "RSA", "n": unsigned_int(numbers.n), "e": unsigned_int(numbers.e)}


def thumbprint(jwk: dict) -> str:
    """RFC 7638 3, written out: the required members, in lexicographic order, no whitespace; SHA-256."""
    if jwk["kty"] == "EC":
        text = f'{{"crv":"{jwk["crv"]}","kty":"EC","x":"{jwk["x"]}","y":"{jwk["y"]}"}}'
    elif jwk["kty"] == "OKP":
        text = f'{{"crv":"{jwk["crv"]}","kty":"OKP","x":"{jwk["x"]}"}}'
    else:
        text = f'{{"e":"{jwk["e"]}","kty":"RSA","n":"{jwk["n"]}"}}'
    return b64(hashlib.sha256(text.encode()).digest())


def ath_of(token: str) -> str:
    return b64(hashlib.sha256(token.encode("ascii")).digest())


JKT = thumbprint(public_jwk(EC_KEY))


def proof_claims(*, token: str | None = TOKEN, htm: str = "GET", htu: str = URL, iat: float = NOW, **more) -> dict:
    claims = {"jti": secrets.token_urlsafe(16), "htm": htm, "htu": htu, "iat": iat, **more}
    if token is not None:
        claims["ath"] = ath_of(token)
    return claims


def make_proof(key=EC_KEY, alg: str = "ES256", *, jwk: dict | None = None, header: dict | None = None,
               drop: tuple[str, ...] = (), **claims) -> str:
    """A DPoP proof signed by `key`, with its public JWK in the header (or `jwk`)."""
    body = {k: v for k, v in proof_claims(**claims).items() if k not in drop}
    headers = {"typ": "dpop+jwt", "jwk": public_jwk(key) if jwk is None else jwk, **(header or {})}
    return jwt.encode(body, key, algorithm=alg, headers=headers)


def check(proof: str, **overrides):
    arguments = {"method": "GET", "url": URL, "now": NOW, "access_token": TOKEN, "jkt": JKT, **overrides}
    return check_proof(proof, **arguments)


def refused(proof: str, message: str, **overrides) -> DPoPError:
    """The proof is refused as invalid, for the reason `message` names (and the message holds neither
    the proof nor the token)."""
    with pytest.raises(DPoPError) as info:
        check(proof, **overrides)
    error = info.value
    assert (error.sub_code, error.status) == (INVALID_PROOF, 401)
    assert message in error.message, error.message
    assert (not proof or proof not in error.message) and TOKEN not in error.message
    return error


# ---- thumbprints, ath, htu --------------------------------------------------------------------------------

def test_the_jwk_thumbprint_is_rfc_7638():
    assert jwk_thumbprint(RFC_7638_KEY) == RFC_7638_THUMBPRINT  # alg and kid are not required members
    # RFC 9449 6.1's example key and its jkt.
    assert jwk_thumbprint({"kty": "EC", "x": "l8tFrhx-34tV3hRICRDY9zCkDlpBhF42UQUfWVAWBFs",
                           "y": "9VE4jf_Ok_o64zbTTlcuNJajHmt6v9TDVrU0CdvGRDA", "crv": "P-256"}) == \
        "0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I"
    for _, key in SIGNERS:
        jwk = public_jwk(key)
        assert jwk_thumbprint(jwk) == thumbprint(jwk)
        assert jwk_thumbprint(dict(reversed(jwk.items())) | {"use": "sig"}) == thumbprint(jwk)
    for bad in ({"kty": "oct", "k": "c2VjcmV0"}, {"kty": "EC", "crv": "P-256", "x": "AA"}, {"kty": ["EC"]},
                {"kty": "RSA", "n": 5, "e": "AQAB"}):
        with pytest.raises(ValueError):
            jwk_thumbprint(bad)


def test_ath_is_the_hash_of_the_token_as_sent():
    # RFC 9449 7.1's example access token and the `ath` of its proof.
    example = "Kz~8mXK1EalYznwH-LC-1fBAo.4Ljp~zsPE_NeO.gxU"
    assert access_token_hash(example) == "fUHyO2r2Z3DZ53EsNrWBb0xWXoaNy59IiKCAqksmQEo"
    assert access_token_hash(TOKEN) == ath_of(TOKEN) != ath_of(TOKEN.removeprefix("lba_at_"))


def test_htu_is_compared_normalised():
    assert normalize_htu("HTTPS://Example.COM:443/a?x=1#f") == "https://example.com/a"
    assert normalize_htu("http://example.com:80") == "http://example.com/"
    assert normalize_htu("http://example.com:8080/a%2fb/%7e%41") == "http://example.com:8080/a%2Fb/~A"
    assert normalize_htu("https://example.com/a/./b/../c/.") == "https://example.com/a/c/"
    assert normalize_htu("https://[::1]:8443/x") == "https://[::1]:8443/x"
    for bad in ("/notes", "example.com/notes", "ftp://example.com/a", "https://", "https://example.com:99999/", 7):
        with pytest.raises(ValueError):
            normalize_htu(bad)


# ---- the proof check --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("alg", "key"), SIGNERS, ids=[alg for alg, _ in SIGNERS])
def test_a_good_proof_of_each_algorithm_is_accepted(alg, key):
    jwk = public_jwk(key)
    proof = make_proof(key, alg, jti="proof-1")
    checked = check(proof, jkt=thumbprint(jwk))
    assert (checked.jkt, checked.jti, checked.iat, checked.htm, checked.htu, checked.alg) == (
        thumbprint(jwk), "proof-1", NOW, "GET", URL, alg)
    assert checked.ath == ath_of(TOKEN) and checked.nonce is None and checked.jwk == jwk
    assert DPOP_ALGS == ("ES256", "EdDSA", "RS256")


def test_the_proof_must_be_one_compact_jws():
    good = make_proof()
    refused("", "required")
    for bad in (good + "," + make_proof(), good + " " + make_proof(), good.rsplit(".", 1)[0], good + ".x",
                good.replace(".", "..", 1), "é" + good, good + "="):
        refused(bad, "not one compact JWS")
    header, payload, signature = good.split(".")
    refused(f"{b64(b'not json')}.{payload}.{signature}", "header is not valid base64url-encoded JSON")
    refused(f"{b64(b'[1]')}.{payload}.{signature}", "header is not valid base64url-encoded JSON")
    refused(f"{header}.{payload}.AAAAA", "signature is not valid base64url")


def test_an_oversized_proof_is_refused():
    assert check(make_proof(padding="x" * 5000)).jti  # well under the cap
    big = make_proof(padding="x" * 8000)
    assert len(big) > 8192
    refused(big, "too large")


def test_typ_must_be_dpop_jwt():
    refused(make_proof(header={"typ": "JWT"}), "typ")
    refused(make_proof(header={"typ": "at+jwt"}), "typ")
    no_typ = jwt.api_jws.PyJWS().encode(json.dumps(proof_claims()).encode(), EC_KEY, algorithm="ES256",
                                         headers={"typ": None, "jwk": public_jwk(EC_KEY)})
    assert "typ" not in jwt.get_unverified_header(no_typ)
    refused(no_typ, "typ")


def test_alg_none_hmac_and_other_algorithms_are_refused():
    header = {"typ": "dpop+jwt", "jwk": public_jwk(EC_KEY)}
    unsigned = jwt.encode(proof_claims(), None, algorithm="none", headers=header)
    refused(unsigned, "not one compact JWS")  # no signature at all
    refused(unsigned + b64(b"signature"), "alg")
    refused(jwt.encode(proof_claims(), b"a shared secret, 32 bytes or more", algorithm="HS256", headers=header), "alg")
    refused(make_proof(RSA_KEY, "PS256"), "alg")
    refused(make_proof(RSA_KEY, "RS512"), "alg")
    forged = forge({"typ": "dpop+jwt", "alg": ["ES256"], "jwk": public_jwk(EC_KEY)}, proof_claims(), b"sig")
    refused(forged.removeprefix("lba_at_"), "alg")


def test_a_crit_header_is_refused():
    refused(make_proof(header={"crit": ["exp"], "exp": 1}), "crit")


def test_the_header_must_carry_a_public_key_of_the_algs_type():
    refused(make_proof(jwk={}), "not a key for ES256")
    refused(make_proof(header={"jwk": "not an object"}), "has no jwk")
    no_jwk = jwt.encode(proof_claims(), EC_KEY, algorithm="ES256", headers={"typ": "dpop+jwt"})
    refused(no_jwk, "has no jwk")
    # The private key itself in the header: refused, although the signature would verify with it.
    private = EC_KEY.private_numbers().private_value
    refused(make_proof(jwk={**public_jwk(EC_KEY), "d": unsigned_int(private, 32)}), "private key")
    for member in ("d", "p", "q", "dp", "dq", "qi"):
        refused(make_proof(RSA_KEY, "RS256", jwk={**public_jwk(RSA_KEY), member: "AQAB"}), "private key")
    refused(make_proof(jwk={"kty": "oct", "k": b64(b"secret")}), "private key")  # a symmetric key is a secret
    refused(make_proof(jwk={"kty": "oct"}), "not a key for ES256")
    # The key type must be the algorithm's: ES256 takes P-256, EdDSA Ed25519, RS256 RSA of 2048 bits or more.
    refused(make_proof(jwk=public_jwk(ED_KEY)), "not a key for ES256")
    refused(make_proof(ED_KEY, "EdDSA", jwk=public_jwk(EC_KEY)), "not a key for EdDSA")
    refused(make_proof(ED_KEY, "EdDSA", jwk={**public_jwk(ED_KEY), "crv": "Ed448"}), "not a key for EdDSA")
    refused(make_proof(RSA_KEY, "RS256", jwk=public_jwk(EC_KEY)), "not a key for RS256")
    p384 = ec.generate_private_key(ec.SECP384R1()).public_key().public_numbers()
    refused(make_proof(jwk={"kty": "EC", "crv": "P-384", "x": unsigned_int(p384.x, 48), "y": unsigned_int(p384.y, 48)}),
            "not a key for ES256")
    short = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    with pytest.warns(jwt.warnings.InsecureKeyLengthWarning):
        short_proof = make_proof(short, "RS256")
    refused(short_proof, "too short", jkt=None)
    refused(make_proof(jwk={**public_jwk(EC_KEY), "x": b64(b"\x01" * 32)}), "not a valid public key")  # off the curve
    refused(make_proof(jwk={**public_jwk(EC_KEY), "x": 7}), "not a valid public key")


def test_the_signature_must_verify_with_the_key_in_the_header():
    refused(make_proof(OTHER_EC_KEY, jwk=public_jwk(EC_KEY)), "signature does not verify")
    header, payload, signature = make_proof().split(".")
    tampered = b64(json.dumps({**proof_claims(), "htm": "GET"}).encode())
    refused(f"{header}.{tampered}.{signature}", "signature does not verify")
    refused(f"{header}.{payload}.{b64(b'x' * 64)}", "signature does not verify")


def test_htm_must_be_the_method():
    refused(make_proof(htm="POST"), "htm")
    refused(make_proof(htm="get"), "htm")  # methods are case-sensitive (RFC 9110 9.1)
    refused(make_proof(drop=("htm",)), "htm")
    assert check(make_proof(htm="DELETE"), method="DELETE").htm == "DELETE"


def test_htu_must_be_the_url_compared_normalised():
    for other in ("https://api.example.com/notes/1", "https://api.example.com/", "http://api.example.com/notes",
                  "https://api.example.com:8443/notes", "https://evil.example/notes", "notes", ""):
        refused(make_proof(htu=other), "htu")
    refused(make_proof(drop=("htu",)), "htu")
    refused(make_proof(htu=["https://api.example.com/notes"]), "htu")
    refused(make_proof(), "htu", url="not a url")
    proof = make_proof(htu="HTTPS://Example.COM:443/a?x=1#f")
    assert check(proof, url="https://example.com/a").htu == "HTTPS://Example.COM:443/a?x=1#f"
    assert check(make_proof(htu="https://example.com/a"), url="HTTPS://Example.COM:443/a?x=1#f").jti


def test_iat_must_be_within_60_seconds_either_way():
    for offset in (-60, -59, 0, 59, 60):
        assert check(make_proof(iat=NOW + offset)).iat == NOW + offset
    for offset in (-61, 61, -3600, 3600):
        refused(make_proof(iat=NOW + offset), "iat")
    refused(make_proof(iat=NOW + 30), "iat", max_age=29)
    for bad in ("1900000000", None, True, float("nan")):
        refused(make_proof(iat=bad), "iat")
    refused(make_proof(drop=("iat",)), "iat")


def test_ath_must_be_the_hash_of_the_access_token():
    refused(make_proof(token=None), "ath")  # missing
    refused(make_proof(token="lba_at_another.token.value"), "ath")
    refused(make_proof(token=TOKEN.removeprefix("lba_at_")), "ath")  # the hash covers the prefix too
    refused(make_proof(token=None, ath="é" * 43), "ath")
    refused(make_proof(), "ath", access_token="lba_at_é")
    assert check(make_proof(token=None), access_token=None).ath is None  # no token to bind: not asked for


def test_the_key_must_be_the_one_the_token_is_bound_to():
    refused(make_proof(OTHER_EC_KEY), "another key")
    refused(make_proof(), "another key", jkt=thumbprint(public_jwk(OTHER_EC_KEY)))
    refused(make_proof(), "another key", jkt="é")
    assert check(make_proof(OTHER_EC_KEY), jkt=None).jkt == thumbprint(public_jwk(OTHER_EC_KEY))


def test_jti_must_be_a_short_non_empty_string():
    assert check(make_proof(jti="j" * 256)).jti == "j" * 256
    for bad in ("", "j" * 257, 7, None):
        refused(make_proof(jti=bad), "jti")
    refused(make_proof(drop=("jti",)), "jti")


def test_nonce_when_the_server_gave_one():
    assert check(make_proof(nonce="n-1"), nonce="n-1").nonce == "n-1"
    refused(make_proof(nonce="n-2"), "nonce", nonce="n-1")
    refused(make_proof(), "nonce", nonce="n-1")
    assert check(make_proof(nonce="n-2")).nonce == "n-2"  # not asked for: not checked


def test_the_challenge_of_an_invalid_proof_is_rfc_9449_7_1():
    error = refused(make_proof(htm="POST"), "htm")
    assert error.challenge == (
        f'DPoP error="invalid_dpop_proof", error_description="{error.message}", {ALGS}')
    assert error.challenge_for(["notes"], None) == error.challenge
    assert error.challenge_for(["notes", "more"], "https://api.example.com/.well-known/oauth-protected-resource") == (
        f'DPoP error="invalid_dpop_proof", error_description="{error.message}", '
        f'resource_metadata="https://api.example.com/.well-known/oauth-protected-resource", scope="notes more", {ALGS}')
    quoted = DPoPError('a "quoted" \\ word')
    assert quoted.challenge == f'DPoP error="invalid_dpop_proof", error_description="a \\"quoted\\" \\\\ word", {ALGS}'
    assert isinstance(quoted, TokenError)


# ---- the replay cache -------------------------------------------------------------------------------------

def test_the_replay_cache_refuses_a_jti_seen_within_the_window():
    cache = ReplayCache()
    assert cache.first_use("a", NOW, NOW)
    assert not cache.first_use("a", NOW, NOW + 1)
    assert not cache.first_use("a", NOW, NOW + 60)  # still within the window
    assert cache.first_use("b", NOW + 10, NOW + 60)
    assert len(cache) == 2
    assert cache.first_use("a", NOW, NOW + 61)  # forgotten once the proof is too old to be accepted anyway
    assert len(cache) == 2  # "a" again, and "b" (until NOW + 70)


def test_the_replay_cache_refuses_rather_than_forgets_when_full():
    cache = ReplayCache(max_entries=3)
    assert all(cache.first_use(jti, NOW, NOW) for jti in ("a", "b", "c"))
    assert cache.full and not cache.first_use("d", NOW, NOW + 1)
    assert not cache.first_use("a", NOW, NOW + 1)
    assert cache.first_use("d", NOW + 30, NOW + 61)  # the first three have expired: room again
    assert len(cache) == 1


def test_the_replay_cache_is_thread_safe():
    cache = ReplayCache()
    results: list[bool] = []
    barrier = threading.Barrier(8)

    def use() -> None:
        barrier.wait()
        results.extend(cache.first_use(f"jti-{i}", NOW, NOW) for i in range(500))

    threads = [threading.Thread(target=use) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results.count(True) == 500 and len(cache) == 500


def test_requires_token_reads_the_dpop_header_without_get_list():
    """A request object whose headers are a plain mapping (no Tornado `get_list`) works too."""

    class Request:
        method = "POST"
        headers = {"Authorization": "dPoP lba_at_x", "DPoP": "the-proof"}

        def full_url(self) -> str:
            return "http://127.0.0.1/notes?x=1"

    assert presented_token(Request()) == ("lba_at_x", DPoPRequest("POST", "http://127.0.0.1/notes?x=1", "the-proof"))
    Request.headers = {"Authorization": "DPoP lba_at_x"}
    with pytest.raises(DPoPError):
        presented_token(Request())
    Request.headers = {"Authorization": "Bearer lba_at_x", "DPoP": "ignored"}
    assert presented_token(Request()) == ("lba_at_x", None)


# ---- the Verifier and requires_token, against a real lbauth server ----------------------------------------

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the proofs involve no database


async def bound_and_unbound(server, **extra) -> tuple[str, str]:
    """Two access tokens signed with the server's key from the same real claims: one bound to
    EC_KEY (`cnf.jkt`), one not."""
    _, claims = await claims_of(server)
    claims = {**claims, **extra}
    return sign(server, {**claims, "cnf": {"jkt": JKT}}), sign(server, claims)


def request_for(token: str, *, server, method: str = "GET", url: str = URL, **claims) -> DPoPRequest:
    return DPoPRequest(method, url, make_proof(token=token, **{"htm": method, "htu": url, "iat": server.clock.now(),
                                                              **claims}))


def refusal(verifier, token: str, **kwargs) -> TokenError:
    with pytest.raises(TokenError) as info:
        verifier.verify(token, **kwargs)
    return info.value


@SQLITE
async def test_the_verifier_checks_dpop_bound_tokens(server, verifier):
    bound, unbound = await bound_and_unbound(server)
    request = request_for(bound, server=server)
    claims = verifier.verify(bound, ["userinfo"], dpop=request)
    assert claims["cnf"] == {"jkt": JKT} and claims.subject == claims["sub"]

    replayed = refusal(verifier, bound, dpop=request)
    assert isinstance(replayed, DPoPError) and replayed.message == (
        "The DPoP proof has been used already: make a new one for each request.")
    assert replayed.challenge == f'DPoP error="invalid_dpop_proof", error_description="{replayed.message}", {ALGS}'

    as_bearer = refusal(verifier, bound)  # RFC 9449 7.2: a bound token is no bearer token
    assert (as_bearer.sub_code, as_bearer.status) == ("oauth2.token.invalid", 401)
    assert as_bearer.challenge == f'DPoP error="invalid_token", {ALGS}'

    unbound_with_proof = refusal(verifier, unbound, dpop=request_for(unbound, server=server))
    assert (unbound_with_proof.sub_code, unbound_with_proof.status) == ("oauth2.token.invalid", 401)
    assert unbound_with_proof.challenge == f'DPoP error="invalid_token", {ALGS}'
    assert verifier.verify(unbound, ["userinfo"])["jti"]  # an unbound token as Bearer: as before

    for bad, reason in ((request_for(bound, server=server, htm="POST"), "htm"),
                        (DPoPRequest("GET", URL, make_proof(OTHER_EC_KEY, token=bound, iat=server.clock.now())),
                         "another key"),
                        (request_for(unbound, server=server), "ath"),
                        (request_for(bound, server=server, iat=server.clock.now() - 61), "iat")):
        error = refusal(verifier, bound, dpop=bad)
        assert isinstance(error, DPoPError) and reason in error.message and bad.proof not in error.message

    # The token's own checks come first, then the proof: refusals of a DPoP request are challenged in the DPoP scheme.
    scope = refusal(verifier, bound, required_scopes=["voice"], dpop=request_for(bound, server=server))
    assert (scope.status, scope.challenge) == (403, f'DPoP error="insufficient_scope", {ALGS}')
    step_up = refusal(verifier, bound, acr_values=["phr"], dpop=request_for(bound, server=server))
    assert step_up.challenge == (
        f'DPoP error="insufficient_user_authentication", error_description="{WEAK}", acr_values="phr", {ALGS}')
    assert refusal(verifier, "lba_at_nope", dpop=request_for("lba_at_nope", server=server)).challenge == \
        f'DPoP error="invalid_token", {ALGS}'

    other_binding = sign(server, {**unverified_claims(bound), "cnf": {"x5t#S256": "abc"}})
    assert refusal(verifier, other_binding).sub_code == "oauth2.token.invalid"
    assert refusal(verifier, other_binding, dpop=request_for(other_binding, server=server)).sub_code == \
        "oauth2.token.invalid"

    server.clock.advance(7200 + 31)
    expired = refusal(verifier, bound, dpop=request_for(bound, server=server))
    assert (expired.sub_code, expired.challenge) == ("oauth2.token.expired", f'DPoP error="invalid_token", {ALGS}')


@SQLITE
async def test_requires_token_takes_authorization_dpop(server, verifier):
    metadata = "https://memory.example/.well-known/oauth-protected-resource"

    class Notes(tornado.web.RequestHandler):
        @requires_token(verifier, "userinfo")
        def get(self) -> None:
            self.finish({"sub": self.token_claims.subject, "cnf": self.token_claims.get("cnf")})

    class Memory(tornado.web.RequestHandler):
        @requires_token(verifier, "agent_memory", acr_values=("phr",), resource_metadata=metadata)
        def delete(self) -> None:
            self.finish({"ok": True})

    bound, unbound = await bound_and_unbound(server, scope="userinfo", **PASSWORD)
    async with resource_service(("/notes", Notes), ("/memory", Memory)) as client:
        url = client.base_url + "/notes"

        def dpop(token: str, scheme: str = "DPoP", **claims) -> dict:
            proof = make_proof(token=token, **{"htu": url, "iat": server.clock.now(), **claims})
            return {"Authorization": f"{scheme} {token}", "DPoP": proof}

        headers = dpop(bound)
        ok = await client.get("/notes", headers=headers)
        assert ok.status == 200, ok.text
        assert ok.json == {"sub": unverified_claims(bound)["sub"], "cnf": {"jkt": JKT}}
        assert (await client.get("/notes?page=2", headers=dpop(bound))).status == 200  # htu has no query
        assert (await client.get("/notes", headers=dpop(bound, scheme="dpop"))).status == 200

        async def refused_with(answer, sub_code: str, challenge: str) -> None:
            assert answer.status == 401, answer.text
            assert answer.json["subCode"] == sub_code
            assert answer.headers["WWW-Authenticate"] == challenge.format(message=answer.json["message"])

        proof_challenge = 'DPoP error="invalid_dpop_proof", error_description="{message}", ' + ALGS
        replay = await client.get("/notes", headers=headers)
        await refused_with(replay, INVALID_PROOF, proof_challenge)
        assert replay.json["message"] == "The DPoP proof has been used already: make a new one for each request."
        for bad in (dpop(bound, htm="POST"), dpop(bound, htu=client.base_url + "/other"),
                    dpop(bound, iat=server.clock.now() - 61), dpop(unbound) | {"Authorization": f"DPoP {bound}"},
                    {"Authorization": f"DPoP {bound}"}):
            await refused_with(await client.get("/notes", headers=bad), INVALID_PROOF, proof_challenge)

        # Two DPoP headers, each a good proof: refused (RFC 9449 4.3 point 1).
        two = HTTPHeaders({"Authorization": f"DPoP {bound}"})
        for _ in range(2):
            two.add("DPoP", make_proof(token=bound, iat=server.clock.now(), htu=url))
        http = AsyncHTTPClient(force_instance=True)
        try:
            response = await http.fetch(HTTPRequest(url, headers=two), raise_error=False)
        finally:
            http.close()
        assert response.code == 401 and json.loads(response.body)["subCode"] == INVALID_PROOF
        assert response.headers["WWW-Authenticate"] == proof_challenge.format(
            message="A request with Authorization: DPoP needs exactly one DPoP header, with the proof.")

        invalid_token = 'DPoP error="invalid_token", ' + ALGS
        await refused_with(await client.get("/notes", bearer=bound), "oauth2.token.invalid", invalid_token)
        await refused_with(await client.get("/notes", headers=dpop(unbound)), "oauth2.token.invalid", invalid_token)
        await refused_with(await client.get("/notes", headers={"Authorization": "DPoP ", "DPoP": "x"}),
                           "oauth2.token.invalid", invalid_token)
        ok = await client.get("/notes", bearer=unbound)
        assert ok.status == 200 and ok.json["cnf"] is None
        missing = await client.get("/notes")
        assert missing.status == 401 and missing.headers["WWW-Authenticate"] == "Bearer"

        # With RFC 9728 metadata and step-up: the same parameters as in Bearer, in the DPoP scheme.
        memory = client.base_url + "/memory"
        short = await client.delete("/memory", headers=dpop(bound, htm="DELETE", htu=memory))
        assert short.status == 403 and short.headers["WWW-Authenticate"] == (
            f'DPoP error="insufficient_scope", scope="agent_memory", resource_metadata="{metadata}", {ALGS}')
        bound_memory, _ = await bound_and_unbound(server, scope="userinfo agent_memory", **PASSWORD)
        weak = await client.delete("/memory", headers=dpop(bound_memory, htm="DELETE", htu=memory))
        await refused_with(weak, "oauth2.token.insufficient_user_authentication",
                           f'DPoP error="insufficient_user_authentication", error_description="{WEAK}", '
                           f'acr_values="phr", resource_metadata="{metadata}", {ALGS}')
        bad_proof = await client.delete("/memory", headers=dpop(bound_memory, htm="GET", htu=memory))
        await refused_with(bad_proof, INVALID_PROOF,
                           'DPoP error="invalid_dpop_proof", error_description="{message}", '
                           f'resource_metadata="{metadata}", scope="agent_memory", {ALGS}')
