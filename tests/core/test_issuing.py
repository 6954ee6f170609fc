"""The issuing step (lbauth/core/oauth/issuing.py): every grant's `Issuance` minted the same way, the
registered extensions run over the token set, and OpenID Connect's ID token is one of them, due by
one rule (contract 6, 15, 17). On a temporary SQLite file with the frozen clock; no HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import jwt
import pytest

from lbauth.clock import FrozenClock
from lbauth.core.oauth.issuing import Issuance, Issuer, SignIn
from lbauth.core.oauth.tokens import TokenSet
from lbauth.core.oidc.id_tokens import at_hash
from lbauth.server import build_services
from lbauth.services import Services
from lbauth.verify import decode_access_token
from lbauth.verify.checklist import Entry
from tests.conftest import START_TIME, make_settings
from tests.core.test_authorization_server import party
from tests.support import unverified_claims

RESOURCE = "https://notes.example/mcp"


@pytest.fixture
def backend() -> str:
    return "sqlite"  # nothing here depends on the database


@pytest.fixture
async def services(tmp_path: Path, database_url: str) -> AsyncIterator[Services]:
    built = await build_services(make_settings(tmp_path, database_url), FrozenClock(START_TIME), announce=False)
    yield built
    await built.db.close()


def issuance(**overrides: Any) -> Issuance:
    fields = {"client_id": "cid_1", "user_id": "usr_1", "asu": "asu_1", "grant_id": "gnt_1",
              "scopes": ("openid", "userinfo"), "audience": None, "refresh_token": "lba_rt_x", "started": START_TIME,
              "jti": "jti-1"}
    return Issuance(**{**fields, **overrides})


def id_token_claims(services: Services, id_token: str) -> tuple[str, dict[str, Any]]:
    header = jwt.get_unverified_header(id_token)
    alg, key = services.keyring.public_keys[header["kid"]]
    assert header["alg"] == alg
    return alg, jwt.decode(id_token, key, algorithms=[alg], audience="cid_1",
                           options={"verify_exp": False, "verify_iat": False})


async def test_the_access_token_says_what_the_issuance_says(services):
    token_set = await services.oauth.issuer.issue(issuance())
    assert (token_set.refresh_token, token_set.expires_in, token_set.scopes) == ("lba_rt_x", 7200,
                                                                                ("openid", "userinfo"))
    assert token_set.id_token is None  # no sign-in remembered: not an OpenID grant's
    claims = services.tokens.check(token_set.access_token)
    assert claims == {"iss": services.settings.issuer, "aud": services.settings.audience, "sub": "usr_1",
                      "client_id": "cid_1", "scope": "openid userinfo", "iat": START_TIME,
                      "exp": START_TIME + 7200, "jti": "jti-1", "gid": "gnt_1", "asu": "asu_1"}


async def test_the_audience_is_the_issuances(services):
    token_set = await services.oauth.issuer.issue(issuance(audience=[RESOURCE, "https://voice.example/"]))
    claims = decode_access_token(token_set.access_token, services.keyring.public_keys,
                                 issuer=services.settings.issuer, audience=RESOURCE, now=START_TIME, leeway=0)
    assert claims["aud"] == [RESOURCE, "https://voice.example/"]


async def test_an_openid_grant_gets_an_id_token_for_its_access_token(services):
    sign_in = SignIn(auth_time=START_TIME - 60, session_id="ses_1", amr=("pwd", "otp", "mfa"))
    token_set = await services.oauth.issuer.issue(issuance(sign_in=sign_in, id_token_alg="ES256", nonce="n-1"))
    assert token_set.id_token is not None
    alg, claims = id_token_claims(services, token_set.id_token)
    assert alg == "ES256"
    assert claims == {"iss": services.settings.issuer, "sub": "asu_1", "aud": "cid_1", "iat": START_TIME,
                      "exp": START_TIME + services.settings.id_token_ttl, "auth_time": START_TIME - 60,
                      "at_hash": at_hash(token_set.access_token, "ES256"), "amr": ["pwd", "otp", "mfa"],
                      "acr": "urn:lbauth:acr:mfa", "nonce": "n-1", "sid": "ses_1"}
    access = decode_access_token(token_set.access_token, services.keyring.public_keys, issuer=services.settings.issuer,
                                 audience=services.settings.audience, now=START_TIME, leeway=0)
    # RFC 9068 2.2.1: the access token says the same of the sign-in.
    assert (access["auth_time"], access["amr"], access["acr"]) == (START_TIME - 60, ["pwd", "otp", "mfa"],
                                                                   "urn:lbauth:acr:mfa")


@pytest.mark.parametrize("overrides", [
    {"sign_in": None, "id_token_alg": "RS256"},  # a code of a request that was not an OpenID one
    {"scopes": ("userinfo",)},  # a refresh narrowed to scopes without openid
    {"id_token_alg": None},
])
async def test_an_id_token_is_due_only_for_an_openid_grant(services, overrides):
    openid = {"sign_in": SignIn(START_TIME, None), "id_token_alg": "RS256"}
    assert (await services.oauth.issuer.issue(issuance(**openid))).id_token is not None
    assert (await services.oauth.issuer.issue(issuance(**{**openid, **overrides}))).id_token is None


class Recording:
    """An extension that notes what it was given and marks the token set it returns."""

    def __init__(self, name: str, seen: list[tuple[str, str | None, int]]) -> None:
        self.name, self.seen = name, seen

    async def extend(self, issuance: Issuance, token_set: TokenSet, issued_at: int) -> TokenSet:
        self.seen.append((self.name, token_set.id_token, issued_at))
        return replace(token_set, id_token=(token_set.id_token or "") + self.name)


async def test_extensions_run_in_their_order_over_the_minted_token_set(services):
    seen: list[tuple[str, str | None, int]] = []
    issuer = Issuer(services.db, services.settings, services.tokens,
                    extensions=[Recording("a", seen), Recording("b", seen)])
    token_set = await issuer.issue(issuance(sign_in=SignIn(START_TIME, None), id_token_alg="RS256"))
    assert seen == [("a", None, START_TIME), ("b", "a", START_TIME)]
    assert token_set.id_token == "ab"  # only what was registered: no ID token extension here
    assert services.tokens.check(token_set.access_token)["jti"] == "jti-1"


async def test_a_grant_entry_at_the_same_second_moves_iat_past_it_while_the_refresh_token_lives(services):
    """AccessTokens.issue_time through the issuing step (docs/architecture.md, "Revocation races"):
    the issuer asks whether the refresh token it returns is still unrevoked."""
    alice = await party(services, "alice@example.com")
    first = await services.oauth.token(services.oauth.grant("authorization_code"), alice.client,
                                       alice.code_params(await alice.code()))
    grant_id = services.tokens.check(first.access_token)["gid"]
    services.checklist.add([Entry(cursor=1, grant_id=grant_id, jti=None, revoked_at=START_TIME,
                                  expires_at=START_TIME + 7200)])
    live = await services.oauth.issuer.issue(issuance(grant_id=grant_id, refresh_token=first.refresh_token))
    assert claims_of(live)["iat"] == START_TIME + 1
    gone = await services.oauth.issuer.issue(issuance(grant_id=grant_id, refresh_token="lba_rt_unknown"))
    assert claims_of(gone)["iat"] == START_TIME  # revoked: `iat` stays when the request began, within the entry


def claims_of(token_set: TokenSet) -> dict[str, Any]:
    return unverified_claims(token_set.access_token)
