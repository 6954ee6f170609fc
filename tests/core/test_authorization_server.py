"""The authorization server (lbauth/core/oauth): client authentication methods (RFC 6749 2.3),
grant dispatch, the order of its errors (RFC 6749 5.2) and the statements each use case sends,
on a temporary SQLite file with the frozen clock; no HTTP."""

from __future__ import annotations

import base64

import jwt
import pytest

from lbauth import errors
from lbauth.core import resources
from lbauth.core.accounts import users
from lbauth.core.clients.apps import CreatedApp
from lbauth.core.oauth.authorization.codes import issue_code
from lbauth.core.oauth.authorization.endpoint import load_client
from lbauth.core.oauth.authorization.request import check_api_request
from lbauth.core.oauth.client_auth import ClientCredentials, presented_credentials
from lbauth.core.oauth.device import DeviceCodeGrant
from lbauth.core.oauth.grants import AuthorizationCodeGrant, RefreshTokenGrant
from lbauth.core.oauth.server import CLIENT_AUTH_METHODS
from lbauth.services import Services
from tests.conftest import START_TIME

REDIRECT_URI = "https://app.example/callback"


def basic(client_id: str, secret: str) -> str:
    """Basic credentials exactly as given, not form-encoded (tests/support.basic_auth encodes):
    these tests send encodings of their own."""
    return "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()


# ---- client authentication: which credentials a request presents (no database) ----------------------

def credentials(authorization: str = "", **form: str) -> ClientCredentials:
    return presented_credentials(CLIENT_AUTH_METHODS, authorization, form)


def test_the_methods_are_basic_then_post_then_none():
    assert [method.name for method in CLIENT_AUTH_METHODS] == ["client_secret_basic", "client_secret_post", "none"]


def test_a_client_id_alone_presents_the_public_method():
    """Contract 17: a public client sends its client_id and no secret; its statement matches only an
    app whose stored digest is the public one, so a confidential app's id alone is invalid_client."""
    presented = credentials(client_id="cid_a")
    assert (presented.client_id, presented.method, presented.public) == ("cid_a", "none", True)


def test_client_secret_basic_decodes_form_encoded_credentials():
    presented = credentials(basic("cid_a%3Ab", "s+e%25cret"))
    assert (presented.client_id, presented.secret, presented.method) == ("cid_a:b", "s e%cret", "client_secret_basic")
    assert "secret" not in repr(presented).replace("client_secret_basic", "")


def test_client_id_beside_basic_must_name_the_same_client():
    assert credentials(basic("cid_a", "s"), client_id="cid_a").client_id == "cid_a"
    with pytest.raises(errors.ClientSecretMismatch, match="names another client"):
        credentials(basic("cid_a", "s"), client_id="cid_b")


@pytest.mark.parametrize(("authorization", "message"), [
    ("Bearer abc", "Use HTTP Basic"),
    ("Basic !!!", "malformed"),
    ("Basic " + base64.b64encode(b"no-colon").decode(), "malformed"),
    (basic("cid_a%00", "s"), "malformed"),
])
def test_unusable_basic_credentials_are_invalid_client(authorization, message):
    with pytest.raises(errors.ClientSecretMismatch, match=message):
        credentials(authorization)


def test_two_methods_at_once_are_invalid_request():
    with pytest.raises(errors.ValidationFailed, match="one client authentication method"):
        credentials(basic("cid_a", "s"), client_secret="s")


def test_client_secret_post_reads_the_form():
    presented = credentials(client_id="cid_a", client_secret="s")
    assert (presented.client_id, presented.secret, presented.method) == ("cid_a", "s", "client_secret_post")


@pytest.mark.parametrize("form", [{}, {"client_secret": "s"},
                                  {"client_id": "cid_a", "client_secret": ""}])
def test_no_credentials_at_all_are_invalid_client(form):
    with pytest.raises(errors.ClientSecretMismatch, match="Client authentication is required"):
        credentials(**form)


# ---- the server on a database ---------------------------------------------------------------------------

@pytest.fixture
def backend() -> str:
    return "sqlite"  # the HTTP tests cover PostgreSQL; these stay fast


class Party:
    """A user and an app of theirs, with what it takes to issue codes."""

    def __init__(self, services: Services, user_id: str, app: CreatedApp) -> None:
        self.services, self.user_id, self.app = services, user_id, app
        self.client = ClientCredentials(app.client_id, app.client_secret, "client_secret_post")
        self.wrong_client = ClientCredentials(app.client_id, "lba_cs_wrong", "client_secret_post")

    async def code(self, scope: tuple[str, ...] = ("userinfo", "memory.read")) -> str:
        s = self.services
        app = await load_client(s.db, self.app.client_id, REDIRECT_URI)
        request = check_api_request(app, REDIRECT_URI, list(scope), "state", None, None)
        return await issue_code(s.db, s.clock, request, self.user_id, s.settings.code_ttl)

    def code_params(self, code: str) -> dict[str, str]:
        return {"code": code, "redirect_uri": REDIRECT_URI}


async def party(services: Services, email: str) -> Party:
    user = await users.create_user(services.db, services.clock, email=email, name="U", password="plover kettle 12")
    app = await services.apps.create(name="App", owner_email=email, redirect_uris=[REDIRECT_URI])
    return Party(services, user.id, app)


@pytest.fixture
async def alice(services: Services) -> Party:
    return await party(services, "alice@example.com")


def verified_access_token(services: Services, access_token: str, *, audience: str) -> dict:
    """The access token checked with PyJWT, not with lbauth's own code: contract 6's `lba_at_` + a
    compact JWS, header `typ: at+jwt`, ES256 (LBAUTH_SIGNING_ALG's default), signed by the key its
    `kid` names in the published JWKS, every required claim present, `iss` and `aud` as given.
    `iat` and `exp` are left to the caller: the frozen clock is not PyJWT's."""
    assert access_token.startswith("lba_at_"), access_token[:10]
    compact = access_token[len("lba_at_"):]
    header = jwt.get_unverified_header(compact)
    assert (header["typ"], header["alg"]) == ("at+jwt", "ES256"), header
    key = jwt.PyJWKSet.from_dict(services.keyring.jwks)[header["kid"]]
    required = ["iss", "aud", "sub", "client_id", "scope", "iat", "exp", "jti", "gid", "asu"]
    return jwt.decode(compact, key, algorithms=["ES256"], issuer=services.settings.issuer, audience=audience,
                      options={"require": required, "verify_iat": False, "verify_exp": False})


async def counted(services: Services, work) -> tuple[object, int]:
    """What `work()` returns or raises, and how many SQL statements it sent."""
    before = services.db.statements
    try:
        result = await work()
    except errors.LbauthError as error:
        result = error
    return result, services.db.statements - before


def test_grant_dispatch(services):
    oauth = services.oauth
    device = "urn:ietf:params:oauth:grant-type:device_code"  # RFC 8628 3.4
    assert list(oauth.grants) == ["authorization_code", "refresh_token", device]
    assert isinstance(oauth.grant("authorization_code"), AuthorizationCodeGrant)
    assert isinstance(oauth.grant("refresh_token"), RefreshTokenGrant)
    assert isinstance(oauth.grant(device), DeviceCodeGrant)
    for unsupported in ("password", "client_credentials", ""):
        with pytest.raises(errors.GrantTypeInvalid,
                           match=f"Supported grant types: authorization_code, refresh_token, {device}."):
            oauth.grant(unsupported)


async def test_a_code_exchange_authenticates_the_client_inside_the_redeem_statement(services, alice):
    oauth = services.oauth
    code = await alice.code()
    token_set, statements = await counted(services, lambda: oauth.token(
        oauth.grant("authorization_code"), alice.client, alice.code_params(code)))
    assert statements == 2  # SQLite: claim the code (client matched by digest), store the refresh token
    assert token_set.scopes == ("userinfo", "memory.read") and token_set.expires_in == 7200
    claims = verified_access_token(services, token_set.access_token, audience=services.settings.audience)
    assert (claims["sub"], claims["client_id"], claims["iat"]) == (alice.user_id, alice.app.client_id, START_TIME)
    assert claims["exp"] == START_TIME + 7200 and claims["scope"] == "userinfo memory.read"
    assert claims["aud"] == services.settings.audience
    error, _ = await counted(services, lambda: oauth.token(
        oauth.grant("authorization_code"), alice.client, alice.code_params(code)))
    assert isinstance(error, errors.CodeUsed)


async def test_a_bad_client_hears_invalid_client_before_any_grant_error(services, alice):
    oauth = services.oauth
    code_grant, refresh_grant = oauth.grant("authorization_code"), oauth.grant("refresh_token")
    code = await alice.code()
    refused = [
        (code_grant, {"redirect_uri": REDIRECT_URI}),  # no code
        (code_grant, alice.code_params("lba_ac_unknown")),
        (code_grant, {**alice.code_params(code), "redirect_uri": REDIRECT_URI + "x"}),
        (refresh_grant, {}),  # no refresh token
        (refresh_grant, {"refresh_token": "lba_rt_unknown", "scope": "no-such-scope"}),
    ]
    for grant, params in refused:
        error, _ = await counted(services, lambda g=grant, p=params: oauth.token(g, alice.wrong_client, p))
        assert isinstance(error, errors.ClientSecretMismatch), (grant.grant_type, params)
    # The same requests from the right client hear what is wrong with the grant.
    expected = [errors.ValidationFailed, errors.CodeInvalid, errors.RedirectUriMismatch, errors.ValidationFailed,
                errors.ScopeInvalid]
    for (grant, params), cls in zip(refused, expected, strict=True):
        error, _ = await counted(services, lambda g=grant, p=params: oauth.token(g, alice.client, p))
        assert type(error) is cls, (grant.grant_type, params, error)
    # None of it used the code up.
    token_set, _ = await counted(services, lambda: oauth.token(code_grant, alice.client, alice.code_params(code)))
    assert not isinstance(token_set, errors.LbauthError)


async def test_an_unknown_client_and_a_wrong_secret_get_the_same_answer(services, alice):
    unknown = ClientCredentials("cid_unknown", alice.app.client_secret, "client_secret_post")
    for client in (unknown, alice.wrong_client):
        error, statements = await counted(services, lambda c=client: services.oauth.authenticate(c))
        assert isinstance(error, errors.ClientSecretMismatch)
        assert error.message == "The client credentials are not valid."
        assert statements == 1
    app, _ = await counted(services, lambda: services.oauth.authenticate(alice.client))
    assert app.client_id == alice.app.client_id


async def test_a_refresh_is_one_statement_and_may_narrow_the_scopes(services, alice):
    oauth = services.oauth
    first = await oauth.token(oauth.grant("authorization_code"), alice.client, alice.code_params(await alice.code()))
    refresh_grant = oauth.grant("refresh_token")
    narrowed, statements = await counted(services, lambda: oauth.token(
        refresh_grant, alice.client, {"refresh_token": first.refresh_token, "scope": "memory.read"}))
    assert statements == 1
    assert narrowed.scopes == ("memory.read",) and narrowed.refresh_token == first.refresh_token
    wider, _ = await counted(services, lambda: oauth.token(
        refresh_grant, alice.client, {"refresh_token": first.refresh_token, "scope": "userinfo chat.write"}))
    assert isinstance(wider, errors.ScopeInvalid)


async def test_a_refresh_token_is_bound_to_its_client(services, alice):
    bob = await party(services, "bob@example.com")
    oauth = services.oauth
    first = await oauth.token(oauth.grant("authorization_code"), alice.client, alice.code_params(await alice.code()))
    error, _ = await counted(services, lambda: oauth.token(
        oauth.grant("refresh_token"), bob.client, {"refresh_token": first.refresh_token}))
    assert isinstance(error, errors.RefreshTokenInvalid)
    code = await alice.code()
    error, _ = await counted(services, lambda: oauth.token(
        oauth.grant("authorization_code"), bob.client, alice.code_params(code)))
    assert isinstance(error, errors.CodeInvalid)


async def test_revocation_and_introspection_authenticate_the_client_once(services, alice):
    oauth = services.oauth
    token_set = await oauth.token(oauth.grant("authorization_code"), alice.client,
                                  alice.code_params(await alice.code()))
    answer, statements = await counted(services, lambda: oauth.introspect(alice.client, token_set.refresh_token))
    assert answer["active"] is True and answer["client_id"] == alice.app.client_id
    assert statements == 2  # the client, then the refresh token
    error, _ = await counted(services, lambda: oauth.revoke(alice.wrong_client, token_set.refresh_token))
    assert isinstance(error, errors.ClientSecretMismatch)
    await oauth.revoke(alice.client, token_set.refresh_token)
    assert await oauth.introspect(alice.client, token_set.refresh_token) == {"active": False}
    assert await oauth.introspect(alice.client, token_set.access_token) == {"active": False}
    with pytest.raises(errors.TokenRevoked):
        services.tokens.check(token_set.access_token)


async def test_a_code_for_a_resource_authenticates_the_client_once(services, alice):
    """RFC 8707 2: the resource is checked inside the claim's own transaction, whose client match is
    the only authentication; a resource the code was not issued for is invalid_target, the claim rolled
    back, the code still good. A bad client still hears invalid_client first."""
    s, oauth = services, services.oauth
    for uri in ("https://notes.example/mcp", "https://voice.example/api"):
        await resources.add_resource(s.db, s.clock, uri)
    app = await load_client(s.db, alice.app.client_id, REDIRECT_URI)
    request = await oauth.authorization_endpoint.resolve_resources(check_api_request(
        app, REDIRECT_URI, ["userinfo"], "state", None, None, ["https://notes.example/mcp"]))
    code = await issue_code(s.db, s.clock, request, alice.user_id, s.settings.code_ttl)
    code_grant = oauth.grant("authorization_code")

    def exchange(client, resource):
        return lambda: oauth.token(code_grant, client, {**alice.code_params(code), "resource": resource})

    error, _ = await counted(services, exchange(alice.wrong_client, "https://voice.example/api"))
    assert isinstance(error, errors.ClientSecretMismatch)
    error, statements = await counted(services, exchange(alice.client, "https://voice.example/api"))
    assert isinstance(error, errors.TargetInvalid)
    assert statements == 2  # SQLite: the claim and the refresh token, both rolled back; no client read
    token_set, statements = await counted(services, exchange(alice.client, "https://NOTES.example/mcp"))
    assert statements == 2
    claims = verified_access_token(s, token_set.access_token, audience="https://notes.example/mcp")
    assert claims["aud"] == "https://notes.example/mcp"  # the form given to add_resource, alone
    assert (claims["sub"], claims["client_id"], claims["scope"]) == (alice.user_id, alice.app.client_id, "userinfo")
    assert (claims["iat"], claims["exp"]) == (START_TIME, START_TIME + 7200)


async def test_a_refused_code_hears_the_first_rule_it_breaks(services, alice):
    """Each fault explained by the claim's own conditions, the first in CodeRule order: another
    client's, (revoked, used,) expired, redirect URI, PKCE; a resource the code was not issued for
    as soon as the code is the client's live, unused one. Nothing is used up."""
    oauth, bob = services.oauth, await party(services, "bob@example.com")
    code_grant = oauth.grant("authorization_code")
    code = await alice.code()

    async def refused(client, **params):
        error, _ = await counted(services, lambda: oauth.token(code_grant, client,
                                                               {**alice.code_params(code), **params}))
        assert isinstance(error, errors.LbauthError)
        return type(error), error.message

    assert (await refused(bob.client))[0] is errors.CodeInvalid
    assert (await refused(alice.client, redirect_uri=REDIRECT_URI + "/x"))[0] is errors.RedirectUriMismatch
    verifier_refused, message = await refused(alice.client, code_verifier="v" * 43)
    assert verifier_refused is errors.CodeVerifierInvalid and "issued without a PKCE challenge" in message
    services.clock.advance(services.settings.code_ttl)
    assert (await refused(alice.client, code_verifier="v" * 43))[0] is errors.CodeExpired  # before PKCE
    assert (await refused(alice.client, resource="https://unknown.example/"))[0] is errors.TargetInvalid
