"""Helpers of the revocation tests (contract sections 7 and 11): the user's authorizations API,
the feed, and the RFC 7009 / RFC 7662 endpoints with either client authentication."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import quote

from tests.flow_helpers import Setup
from tests.support import basic_auth

ACCESS_TTL = 7200
VERIFIER_LEEWAY = 60  # entries outlive the tokens they cover by the most leeway a verifier may use
REFRESH_TTL = 2592000
INVALID_TOKEN = 'Bearer error="invalid_token"'
AUTHORIZATION_FIELDS = {"appId", "clientId", "appName", "scopes", "grantedAt"}
ACCESS_INTROSPECTION_FIELDS = {"active", "token_type", "scope", "client_id", "sub", "iat", "exp", "iss", "aud", "jti"}


def iso(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(value: str) -> int:
    """An ISO 8601 UTC time with a `Z` suffix (contract 3), as a Unix time."""
    assert isinstance(value, str) and value.endswith("Z"), value
    return int(datetime.fromisoformat(value[:-1] + "+00:00").timestamp())


async def me(server, bearer):
    return await server.client.get("/api/auth/me", bearer=bearer)


async def assert_revoked_at_me(server, access_token: str) -> None:
    r = await me(server, access_token)
    r.assert_error(401, "oauth2.token.revoked")
    assert r.headers["WWW-Authenticate"] == INVALID_TOKEN


async def assert_works_at_me(server, access_token: str) -> None:
    r = await me(server, access_token)
    assert r.status == 200, r.text


async def authorizations(server, user_token: str) -> list[dict]:
    r = await server.client.get("/api/auth/authorizations", bearer=user_token)
    assert r.status == 200, r.text
    return r.data["items"]


async def revoke_app(server, user_token: str, client_id: str):
    return await server.client.delete(f"/api/auth/authorizations/{quote(client_id, safe='')}", bearer=user_token)


async def feed(server, since: str | None = None, headers: dict | None = None):
    path = "/api/oauth/revocations" + (f"?since={quote(since, safe='')}" if since is not None else "")
    return await server.client.get(path, headers=headers)


def basic(client_id: str, client_secret: str) -> dict[str, str]:
    """The `Authorization` header of client_secret_basic, as a dict for `headers=`."""
    return {"Authorization": basic_auth(client_id, client_secret)}


async def rfc_post(server, endpoint: str, setup: Setup, auth: str = "client_secret_basic", **form: str):
    """POST /oauth/revoke or /oauth/introspect as `setup`'s client, authenticated as `auth` says."""
    if auth == "client_secret_basic":
        return await server.client.post(endpoint, form=form, headers=basic(setup.client_id, setup.client_secret))
    assert auth == "client_secret_post"
    return await server.client.post(endpoint, form={**form, "client_id": setup.client_id,
                                                    "client_secret": setup.client_secret})


async def revoke_token(server, setup: Setup, token: str, auth: str = "client_secret_basic", **extra: str):
    return await rfc_post(server, "/oauth/revoke", setup, auth, token=token, **extra)


async def introspect(server, setup: Setup, token: str, auth: str = "client_secret_basic", **extra: str):
    r = await rfc_post(server, "/oauth/introspect", setup, auth, token=token, **extra)
    assert r.status == 200, r.text
    assert r.headers["Content-Type"].startswith("application/json")
    return r.json


def assert_revoke_ok(r) -> None:
    """RFC 7009 2.2: HTTP 200; the body is `{}` as JSON (contract 7: clients parse it)."""
    assert r.status == 200, r.text
    assert r.headers["Content-Type"].split(";")[0] == "application/json" and r.json == {}


async def second_app(server, owner: Setup) -> Setup:
    """Another app (another client), authorized by the same user."""
    app = await server.create_app(owner.user["email"], name="Other App", redirect_uris=[owner.redirect_uri])
    return Setup(user=owner.user, token=owner.token, app=app)


async def other_user(server, setup: Setup) -> Setup:
    """Another user, logged in, with the same app."""
    user = await server.create_user()
    token = await server.login(user["email"], user["password"])
    return Setup(user=user, token=token, app=setup.app)
