"""Access tokens are signed by `Signer.sign` (lbauth.core.crypto.keys): the same compact JWS that
`jwt.encode` makes, for every signing algorithm (contract section 8)."""

from __future__ import annotations

import jwt
import pytest

from lbauth.core.crypto.keys import Signer, generate_private_key

CLAIMS = {"iss": "https://auth.example", "aud": "https://api.example", "sub": "asu_1", "client_id": "c",
          "scope": "userinfo email", "iat": 1_900_000_000, "exp": 1_900_000_900, "jti": "j", "gid": "gnt_1",
          "asu": "asu_1", "name": "Zoë"}


@pytest.mark.parametrize("alg", ["ES256", "RS256", "EdDSA"])
def test_a_signed_token_is_what_pyjwt_makes(alg: str) -> None:
    key = generate_private_key(alg)
    token = Signer("kid-1", alg, key).sign(CLAIMS, typ="at+jwt")
    expected = jwt.encode(CLAIMS, key, algorithm=alg, headers={"kid": "kid-1", "typ": "at+jwt"})
    if alg == "ES256":  # ECDSA signatures are randomized: the same header and payload, and it verifies
        assert token.rsplit(".", 1)[0] == expected.rsplit(".", 1)[0]
    else:
        assert token == expected
    assert jwt.get_unverified_header(token) == {"alg": alg, "kid": "kid-1", "typ": "at+jwt"}
    assert jwt.decode(token, key.public_key(), algorithms=[alg], audience="https://api.example",
                      options={"verify_iat": False, "verify_exp": False}) == CLAIMS


@pytest.mark.parametrize("access_alg", ["ES256", "EdDSA"])
def test_without_a_key_of_the_setting_access_tokens_keep_the_first_starts_key_not_the_id_token_key(access_alg):
    """Contract 8: the first start makes the access key and the RS256 ID-token key, often in the
    same second. Whatever LBAUTH_SIGNING_ALG later names, access tokens keep the key with the
    access-token role, whatever the kids' order."""
    from lbauth.core.crypto.keys import KeyRing, _new_key
    from lbauth.core.crypto.masterkey import MasterKeys, generate_key_text
    from lbauth.storage.records import KeyRole

    master = MasterKeys.parse(generate_key_text(), "test")
    now = 1_900_000_000
    for _ in range(8):  # random kids: the RS256 one sorts first about every other time
        keys = [_new_key(access_alg, "active", master, now, KeyRole.ACCESS_TOKENS),
                _new_key("RS256", "active", master, now)]
        for ordered in (keys, keys[::-1]):
            ring = KeyRing.build(ordered, master)
            assert ring.signer.alg == access_alg
            assert set(ring.signers) == {access_alg, "RS256"}


def test_a_rotated_access_key_younger_than_the_id_token_key_keeps_signing_access_tokens():
    """The known limit of before: after a rotation of the access-token key, the oldest active key
    is the RS256 ID-token key; access tokens must not move to it."""
    from lbauth.core.crypto.keys import KeyRing, _new_key
    from lbauth.core.crypto.masterkey import MasterKeys, generate_key_text
    from lbauth.storage.records import KeyRole

    master = MasterKeys.parse(generate_key_text(), "test")
    now = 1_900_000_000
    id_token_key = _new_key("RS256", "active", master, now)
    rotated = _new_key("ES256", "active", master, now + 1000, KeyRole.ACCESS_TOKENS)
    ring = KeyRing.build([id_token_key, rotated], master)
    assert (ring.signer.kid, ring.signer.alg) == (rotated.kid, "ES256")
