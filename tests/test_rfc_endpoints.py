"""What POST /oauth/revoke (RFC 7009) and POST /oauth/introspect (RFC 7662) share (contract 11):
client authentication (RFC 6749 2.3.1), invalid_request, and their RFC 8414 metadata. They answer in
the RFCs' own shapes."""

from __future__ import annotations

import secrets
from urllib.parse import quote, urlsplit

import pytest

from tests.flow_helpers import Setup, full_setup, refresh, tokens_for
from tests.revocation_helpers import (
    assert_revoke_ok,
    assert_revoked_at_me,
    assert_works_at_me,
    basic,
    rfc_post,
)

# ---- client authentication and requests -----------------------------------------------------------------

def bad_credentials(s: Setup) -> dict[str, dict]:
    """Ways to fail client authentication: (extra form fields, headers)."""
    unknown = "cid_" + secrets.token_hex(12)
    return {
        "basic_wrong_secret": {"headers": basic(s.client_id, s.client_secret + "x")},
        "basic_unknown_client": {"headers": basic(unknown, s.client_secret)},
        "post_wrong_secret": {"form": {"client_id": s.client_id, "client_secret": "lba_cs_" + "C" * 43}},
        "post_unknown_client": {"form": {"client_id": unknown, "client_secret": s.client_secret}},
        "post_id_without_secret": {"form": {"client_id": s.client_id}},
        "none": {},
    }


@pytest.mark.parametrize("way", ["basic_wrong_secret", "basic_unknown_client", "post_wrong_secret",
                                 "post_unknown_client", "post_id_without_secret", "none"])
@pytest.mark.parametrize("endpoint", ["/oauth/revoke", "/oauth/introspect"])
async def test_bad_client_credentials_are_invalid_client_and_revoke_nothing(server, endpoint, way):
    s = await full_setup(server)
    t = await tokens_for(server, s)
    attempt = bad_credentials(s)[way]
    for token in (t["refreshToken"], t["accessToken"]):
        r = await server.client.post(endpoint, form={"token": token, **attempt.get("form", {})},
                                     headers=attempt.get("headers"))
        assert r.status == 401, (r.status, r.text)
        assert r.json["error"] == "invalid_client"
        if "headers" in attempt:  # RFC 6749 5.2: a failed Authorization header gets a challenge
            assert r.headers.get("WWW-Authenticate", "").lower().startswith("basic")
    await assert_works_at_me(server, t["accessToken"])
    assert (await refresh(server, t["refreshToken"], s.client_id, s.client_secret)).status == 200


@pytest.mark.parametrize("auth", ["client_secret_basic", "client_secret_post"])
@pytest.mark.parametrize("endpoint", ["/oauth/revoke", "/oauth/introspect"])
async def test_missing_token_is_invalid_request(server, endpoint, auth):
    s = await full_setup(server)
    r = await rfc_post(server, endpoint, s, auth)
    assert r.status == 400, r.text
    assert r.json["error"] == "invalid_request"
    r = await rfc_post(server, endpoint, s, auth, token="")
    assert r.status == 400 and r.json["error"] == "invalid_request"


@pytest.mark.parametrize("endpoint", ["/oauth/revoke", "/oauth/introspect"])
async def test_client_secret_in_the_query_string_is_refused(server, endpoint):
    s = await full_setup(server)
    t = await tokens_for(server, s)
    r = await server.client.post(f"{endpoint}?client_id={s.client_id}&client_secret={quote(s.client_secret)}",
                                 form={"token": t["refreshToken"]})
    # RFC 6749 2.3.1 (contract 6): refused as a malformed request, naming the query string.
    assert r.status == 400 and set(r.json) == {"error", "error_description"}, r.text
    assert r.json["error"] == "invalid_request", r.text
    assert "client_secret" in r.json["error_description"] and "query string" in r.json["error_description"]
    assert (await refresh(server, t["refreshToken"], s.client_id, s.client_secret)).status == 200


# ---- metadata (RFC 8414) --------------------------------------------------------------------------------

async def test_metadata_advertises_revocation_and_introspection_endpoints_that_work(server):
    meta = (await server.client.get("/.well-known/oauth-authorization-server")).json
    s = await full_setup(server)
    t = await tokens_for(server, s)
    for name, path in (("revocation_endpoint", "/oauth/revoke"), ("introspection_endpoint", "/oauth/introspect")):
        url = urlsplit(meta[name])
        assert url.scheme in ("http", "https") and url.netloc, meta[name]
        assert url.path.endswith(path) and not url.query and not url.fragment
        methods = meta.get(f"{name}_auth_methods_supported")
        if methods is not None:  # RFC 8414 2: if omitted, the default is client_secret_basic
            assert {"client_secret_basic", "client_secret_post"} <= set(methods)

    r = await server.client.post(meta["introspection_endpoint"], form={"token": t["accessToken"]},
                                 headers=basic(s.client_id, s.client_secret))
    assert r.status == 200 and r.json["active"] is True
    r = await server.client.post(meta["revocation_endpoint"], form={"token": t["accessToken"]},
                                 headers=basic(s.client_id, s.client_secret))
    assert_revoke_ok(r)
    await assert_revoked_at_me(server, t["accessToken"])
