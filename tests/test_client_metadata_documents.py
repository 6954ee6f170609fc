"""Client ID metadata documents (contract 17; draft-ietf-oauth-client-id-metadata-document-01).

The documents are served by a real HTTP and HTTPS server in the test (a test CA that
LBAUTH_OUTBOUND_CA_FILE names), and lbauth fetches them when an authorization request names their
URL as its client_id. In development loopback addresses may be fetched; in production they are
refused (the address guard). The front channel is driven as a browser would (tests/flow_helpers.py).
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import tornado.httpserver
import tornado.netutil
import tornado.web
from tornado.httputil import HTTPHeaders

from lbauth.core import urls
from lbauth.core.registration.documents import MAX_CACHE_SECONDS, is_document_url
from lbauth.outbound import ForbiddenAddress, PublicOnlyResolver, freshness_seconds
from lbauth.storage.records import Registration
from lbauth.storage.repo import apps as apps_repo
from tests.client import Client
from tests.conftest import TestServer, running_server, start_server
from tests.flow_helpers import PageSession, front_params, oauth_url, pkce_pair, redirect_query
from tests.test_oidc_openid_client import make_certificates

# ---- a site publishing documents ------------------------------------------------------------------------


@dataclass
class Answer:
    body: bytes
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    chunked: bool = False


class DocumentHandler(tornado.web.RequestHandler):
    def initialize(self, site: Site) -> None:
        self.site = site

    async def get(self, path: str) -> None:
        self.site.hits[path] += 1
        self.site.accept.append(self.request.headers.get("Accept"))
        answer = self.site.answers.get(path)
        if answer is None:
            self.set_status(404)
            return
        if answer.delay:
            self.site.waiting += 1
            self.site.most_waiting = max(self.site.most_waiting, self.site.waiting)
            try:
                await asyncio.sleep(answer.delay)
            finally:
                self.site.waiting -= 1
            if self.request.connection.stream.closed():  # the fetcher gave up: nothing to answer
                self._finished = True
                return
        self.set_status(answer.status)
        for name, value in answer.headers.items():
            self.set_header(name, value)
        if answer.chunked:  # no Content-Length: Transfer-Encoding chunked, 1 KiB at a time
            for start in range(0, len(answer.body), 1024):
                self.write(answer.body[start:start + 1024])
                await self.flush()
            return
        self.write(answer.body)


class Site:
    """Serves `answers[path]` over http://127.0.0.1:P and https://127.0.0.1:Q (the test CA), counts
    the requests for each path, and how many delayed answers are pending (at most, `most_waiting`)."""

    def __init__(self, directory: Path) -> None:
        self.ca, cert, key, _ = make_certificates(directory)
        self.answers: dict[str, Answer] = {}
        self.hits: collections.Counter[str] = collections.Counter()
        self.accept: list[str | None] = []
        self.waiting = self.most_waiting = 0
        app = tornado.web.Application([(r"/(.*)", DocumentHandler, {"site": self})])
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        self.servers = []
        ports = []
        for options in (None, context):
            sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
            server = tornado.httpserver.HTTPServer(app, ssl_options=options)
            server.add_sockets(sockets)
            self.servers.append(server)
            ports.append(sockets[0].getsockname()[1])
        self.http_base, self.https_base = f"http://127.0.0.1:{ports[0]}", f"https://127.0.0.1:{ports[1]}"

    def publish(self, path: str, document: dict[str, Any] | None = None, *, https: bool = True, **answer: Any) -> str:
        """Serve `document` (its client_id defaulting to its own URL) at `path`; returns the URL."""
        url = (self.https_base if https else self.http_base) + "/" + path
        if document is not None:
            document = {"client_id": url, **document}
            answer.setdefault("body", json.dumps(document).encode())
            answer.setdefault("headers", {"Content-Type": "application/json"})
        self.answers[path] = Answer(**answer)
        return url

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


@pytest.fixture
def site(tmp_path: Path) -> Any:
    published = Site(tmp_path)
    yield published
    published.stop()


@pytest.fixture
async def dev(tmp_path: Path, database_url: str, site: Site) -> AsyncIterator[TestServer]:
    """lbauth in development: documents on loopback addresses may be fetched."""
    async with running_server(tmp_path, database_url, env="development", outbound_ca_file=str(site.ca)) as server:
        yield server


@pytest.fixture
async def prod(tmp_path: Path, database_url: str, site: Site) -> AsyncIterator[TestServer]:
    """lbauth in production: only globally routable addresses may be fetched."""
    async with running_server(tmp_path, database_url, env="production", outbound_ca_file=str(site.ca)) as server:
        yield server


CALLBACK = "https://agent.example/callback"


def document(**fields: Any) -> dict[str, Any]:
    return {"client_name": "Agent Smith", "client_uri": "https://agent.example/", "redirect_uris": [CALLBACK],
            "token_endpoint_auth_method": "none", "grant_types": ["authorization_code", "refresh_token"],
            "scope": "userinfo", **fields}


def request_url(client_id: str, redirect_uri: str = CALLBACK, challenge: str | None = None) -> str:
    challenge = challenge or pkce_pair()[1]
    return oauth_url(front_params(client_id, redirect_uri, code_challenge=challenge, code_challenge_method="S256"))


async def refused(server: TestServer, client_id: str, redirect_uri: str = CALLBACK) -> str:
    """The authorization request ends on the 400 error page (never a redirect, no sign-in form);
    returns the page's text."""
    page = await PageSession(server).get(request_url(client_id, redirect_uri))
    assert page.status == 400, (page.status, page.text[:300])
    assert page.location is None and page.login_form() is None
    return page.text


async def accepted(server: TestServer, client_id: str, redirect_uri: str = CALLBACK) -> None:
    """The request is good: a visitor is asked to sign in."""
    page = await PageSession(server).get(request_url(client_id, redirect_uri))
    assert page.status == 200 and page.login_form() is not None, (page.status, page.text[:300])


async def consent(server: TestServer, client_id: str, redirect_uri: str = CALLBACK,
                  user: dict | None = None, challenge: str | None = None) -> tuple[PageSession, Any]:
    user = user or await server.create_user()
    session = PageSession(server)
    page = await session.open_logged_in(request_url(client_id, redirect_uri, challenge), user["email"],
                                        user["password"])
    assert page.status == 200 and page.consent_form() is not None, (page.status, page.text[:300])
    return session, page


# ---- the flow ----------------------------------------------------------------------------------------------

async def test_a_valid_https_document_completes_the_authorization(dev: TestServer, site: Site) -> None:
    client_id = site.publish("agents/smith.json", document())
    user = await dev.create_user()
    session, page = await consent(dev, client_id, user=user)
    assert "Not verified by the operator" in page.text
    assert "Agent Smith" in page.text and "https://agent.example/" in page.text
    assert "published by 127.0.0.1" in page.text  # the client id's host
    assert "Its codes go to agent.example" in page.text
    answer = await session.decide(page, "approve")
    assert answer.status in (302, 303)
    query = redirect_query(answer.location, CALLBACK)
    assert query["code"][0] and query["iss"] == [dev.settings.issuer]
    assert site.accept[0] == "application/json"
    metadata = (await dev.client.get("/.well-known/oauth-authorization-server")).json
    assert metadata["client_id_metadata_document_supported"] is True
    # NOTE: exchanging the code at /oauth/token as a public client needs helper pub's `none` method.

    # The user sees the app under its URL client id and revokes it by that id, percent-encoded.
    # The connected-apps page links to the app's revoke page by its client id, one encoded segment.
    revoke_page = "/account/apps/" + quote(client_id, safe="") + "/revoke"
    assert revoke_page in (await session.get("/account/apps")).response.text
    confirm = await session.get(revoke_page)
    assert confirm.status == 200 and "Agent Smith" in confirm.text
    token = await dev.login(user["email"], user["password"])
    listed = (await dev.client.get("/api/auth/authorizations", bearer=token)).data
    assert [(item["clientId"], item["appName"]) for item in listed["items"]] == [(client_id, "Agent Smith")]
    revoked = await dev.client.request("DELETE", "/api/auth/authorizations/" + quote(client_id, safe=""),
                                       bearer=token)
    assert revoked.status == 200, revoked.text
    assert (await dev.client.request("DELETE", "/api/auth/authorizations/" + quote(client_id, safe=""),
                                     bearer=token)).status == 404


async def test_an_operator_app_is_not_marked(dev: TestServer) -> None:
    owner = await dev.create_user()
    app = await dev.create_app(owner["email"], redirect_uris=[CALLBACK])
    _, page = await consent(dev, app["clientId"])
    assert "Not verified" not in page.text


async def test_a_desktop_agent_document_on_an_ephemeral_port(dev: TestServer, site: Site) -> None:
    """Shaped like the documents desktop agents publish: port-less loopback redirect URIs, a public
    client, no refresh_token grant. Any port is accepted; another path, or the localhost rule, not."""
    client_id = site.publish("agent.json", {
        "client_name": "Desktop Agent", "redirect_uris": ["http://localhost/callback", "http://127.0.0.1/callback"],
        "token_endpoint_auth_method": "none", "grant_types": ["authorization_code"], "response_types": ["code"]},
        https=False)
    for redirect_uri in ("http://127.0.0.1:54321/callback", "http://localhost:61234/callback"):
        session, page = await consent(dev, client_id, redirect_uri)
        assert "program running on this device" in page.text and "Not verified by the operator" in page.text
        answer = await session.decide(page, "approve")
        assert redirect_query(answer.location, redirect_uri)["code"][0]
    # Redirect URIs not in the document: refused, the localhost rule is for operator apps only.
    for other in ("http://127.0.0.1:54321/other", "http://localhost:54321/", "https://evil.example/callback"):
        assert "redirect URI" in await refused(dev, client_id, other)


async def test_a_document_client_redeems_its_code_as_a_public_client(dev: TestServer, site: Site) -> None:
    """Contract 17: a desktop agent's document completes the flow and gets a refresh token, though its
    grant_types leave refresh_token out."""
    client_id = site.publish("agent.json", {
        "client_name": "Desktop Agent", "redirect_uris": ["http://127.0.0.1/callback"],
        "token_endpoint_auth_method": "none", "grant_types": ["authorization_code"]}, https=False)
    redirect_uri = "http://127.0.0.1:50123/callback"
    verifier, challenge = pkce_pair()
    session, page = await consent(dev, client_id, redirect_uri, challenge=challenge)
    code = redirect_query((await session.decide(page, "approve")).location, redirect_uri)["code"][0]
    answer = await dev.client.post("/oauth/token", form={
        "grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri, "client_id": client_id,
        "code_verifier": verifier})
    assert answer.status == 200, answer.text
    tokens = answer.json
    assert tokens["access_token"] and tokens["refresh_token"]


# ---- what is refused ---------------------------------------------------------------------------------------

async def test_production_refuses_a_document_on_a_loopback_address(prod: TestServer, site: Site) -> None:
    client_id = site.publish("agents/smith.json", document())
    for host in ("127.0.0.1", "localhost"):
        text = await refused(prod, client_id.replace("127.0.0.1", host))
        assert "not a public address" in text
    assert site.hits["agents/smith.json"] == 0  # never connected to


async def test_production_accepts_only_https_client_ids(prod: TestServer, site: Site) -> None:
    """In production an http URL is no metadata document: an unknown client."""
    client_id = site.publish("agent.json", document(), https=False)
    assert "does not exist" in await refused(prod, client_id)
    assert site.hits["agent.json"] == 0


@pytest.mark.parametrize(("change", "reason"), [
    ({"client_id": "https://other.example/agent.json"}, "its client_id is not the URL"),
    ({"client_secret": "s3cr3t"}, "contains a client_secret"),
    ({"token_endpoint_auth_method": "client_secret_basic"}, "token_endpoint_auth_method must be none"),
    ({"redirect_uris": []}, "redirect_uris must be a non-empty array"),
    ({"redirect_uris": ["javascript:alert(1)"]}, "its redirect_uris hold"),
    ({"redirect_uris": ["https://agent.example/cb#x"]}, "fragment"),
])
async def test_an_invalid_document_is_refused_naming_the_problem(dev: TestServer, site: Site, change: dict,
                                                                 reason: str) -> None:
    client_id = site.publish("bad.json", document(**change))
    assert reason in await refused(dev, client_id)


async def test_a_client_id_with_a_different_trailing_slash_is_not_the_url(dev: TestServer, site: Site) -> None:
    """Simple string comparison: no normalisation makes `.../x.json/` or `HTTPS://` equal."""
    url = site.https_base + "/slash.json"
    for claimed in (url + "/", url.replace("https://", "HTTPS://")):
        site.publish("slash.json", document(client_id=claimed))
        assert "its client_id is not the URL" in await refused(dev, url)


async def test_a_document_over_5_kib_is_refused(dev: TestServer, site: Site) -> None:
    for chunked in (False, True):
        client_id = site.publish("big.json", document(padding="x" * 5200), chunked=chunked)
        assert "larger than 5120 bytes" in await refused(dev, client_id)
    small = site.publish("small.json", document(padding="x" * 4000))
    await accepted(dev, small)


async def test_a_redirect_is_not_followed(dev: TestServer, site: Site) -> None:
    target = site.publish("real.json", document())
    client_id = site.publish("moved.json", status=302, body=b"", headers={"Location": target})
    assert "redirect (302)" in await refused(dev, client_id)
    assert site.hits["real.json"] == 0


async def test_an_error_answer_is_not_cached(dev: TestServer, site: Site) -> None:
    url = site.publish("flaky.json", status=503, body=b"busy", headers={"Cache-Control": "max-age=3600"})
    assert "HTTP 503" in await refused(dev, url)
    site.publish("flaky.json", document(client_id="https://wrong.example/"), headers={"Cache-Control": "max-age=3600"})
    assert "client_id" in await refused(dev, url)  # an invalid document is not kept either
    site.publish("flaky.json", document(), headers={"Cache-Control": "max-age=3600"})
    await accepted(dev, url)
    assert site.hits["flaky.json"] == 3


async def test_a_slow_document_times_out(dev: TestServer, site: Site) -> None:
    client_id = site.publish("slow.json", document(), delay=6)
    assert "did not answer within 5 seconds" in await refused(dev, client_id)


async def test_a_document_that_is_not_a_json_object_is_refused(dev: TestServer, site: Site) -> None:
    for body, reason in ((b"<html></html>", "not JSON"), (b"[1, 2]", "not a JSON object")):
        client_id = site.publish("odd.json", body=body)
        assert reason in await refused(dev, client_id)


# ---- HTTP caching ------------------------------------------------------------------------------------------

async def test_max_age_is_honoured(dev: TestServer, site: Site) -> None:
    url = site.publish("cached.json", document(), headers={"Content-Type": "application/json",
                                                            "Cache-Control": "public, max-age=600"})
    await accepted(dev, url)
    await accepted(dev, url)
    assert site.hits["cached.json"] == 1
    dev.clock.advance(599)
    await accepted(dev, url)
    assert site.hits["cached.json"] == 1
    dev.clock.advance(2)
    await accepted(dev, url)
    assert site.hits["cached.json"] == 2


async def test_caching_is_capped_at_24_hours(dev: TestServer, site: Site) -> None:
    url = site.publish("week.json", document(), headers={"Cache-Control": "max-age=604800"})
    await accepted(dev, url)
    dev.clock.advance(MAX_CACHE_SECONDS - 1)
    await accepted(dev, url)
    assert site.hits["week.json"] == 1
    dev.clock.advance(2)
    await accepted(dev, url)
    assert site.hits["week.json"] == 2


@pytest.mark.parametrize("headers", [{"Cache-Control": "no-store, max-age=600"}, {"Cache-Control": "no-cache"}, {}])
async def test_without_caching_a_document_is_fetched_every_time(dev: TestServer, site: Site, headers: dict) -> None:
    url = site.publish("fresh.json", document(), headers=headers)
    for _ in range(3):
        await accepted(dev, url)
    assert site.hits["fresh.json"] == 3


async def test_a_new_copy_replaces_the_old_one(dev: TestServer, site: Site) -> None:
    """Once the cached copy expires, the new document's redirect URIs are the ones that count."""
    url = site.publish("moving.json", document(), headers={"Cache-Control": "max-age=60"})
    await accepted(dev, url)
    site.publish("moving.json", document(redirect_uris=["https://agent.example/new"]))
    await accepted(dev, url)  # still the cached copy
    dev.clock.advance(61)
    assert "redirect URI" in await refused(dev, url)
    await accepted(dev, url, "https://agent.example/new")


def test_freshness_from_the_answers_headers() -> None:
    def lifetime(**headers: str) -> int:
        return freshness_seconds(HTTPHeaders({k.replace("_", "-"): v for k, v in headers.items()}), now=1_000_000)
    assert lifetime() == 0
    assert lifetime(Cache_Control="max-age=120") == 120
    assert lifetime(Cache_Control="max-age=120", Age="20") == 100
    assert lifetime(Cache_Control="private, max-age=99999999") == MAX_CACHE_SECONDS
    assert lifetime(Cache_Control="max-age=120, no-store") == 0
    assert lifetime(Cache_Control="no-cache") == 0
    assert lifetime(Expires="Thu, 01 Jan 2026 01:00:00 GMT", Date="Thu, 01 Jan 2026 00:00:00 GMT") == 3600
    assert lifetime(Expires="0", Date="Thu, 01 Jan 2026 00:00:00 GMT") == 0
    assert lifetime(Cache_Control="max-age=60", Expires="Thu, 01 Jan 2026 01:00:00 GMT",
                    Date="Thu, 01 Jan 2026 00:00:00 GMT") == 60
    # Numbers too long to parse (Python refuses 4,300 digits and more) count as very large.
    assert lifetime(Cache_Control="max-age=" + "9" * 5000) == 86400
    assert lifetime(Cache_Control="max-age=600", Age="9" * 5000) == 0


async def test_a_document_with_a_huge_max_age_is_cached_for_24_hours(dev: TestServer, site: Site) -> None:
    """A `max-age` of 5,000 digits was a 500 with a traceback."""
    url = site.publish("huge.json", document(), headers={"Cache-Control": "max-age=" + "9" * 5000})
    await accepted(dev, url)
    await accepted(dev, url)
    assert site.hits["huge.json"] == 1


# ---- what an anonymous caller can make lbauth fetch and store -----------------------------------------------

def on_localhost(site: Site, path: str, **fields: Any) -> str:
    """A document at http://localhost:P/path: the same site under another host name."""
    url = site.http_base.replace("127.0.0.1", "localhost") + "/" + path
    site.publish(path, document(client_id=url, **fields), https=False)
    return url


async def document_apps(server: TestServer) -> set[str]:
    stored = await server.db.read(apps_repo.all_apps)
    return {app.client_id for app in stored if app.registration == Registration.DOCUMENT}


async def test_a_host_that_stalls_keeps_no_other_host_waiting(dev: TestServer, site: Site) -> None:
    """Twenty requests naming documents on a host that never answers in time hold two fetches of
    that host at once, never every fetch slot: a client on another host signs its user in."""
    stalled = [site.publish(f"stall/{n}.json", document(), https=False, delay=6) for n in range(20)]
    attacker = Client(dev.url, max_clients=20)  # the test's own client sends at most 10 at once
    waiting = [asyncio.ensure_future(attacker.get(request_url(url))) for url in stalled]
    for _ in range(100):
        if site.waiting >= 2:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)  # every stalled request is now fetching or waiting for a slot
    await accepted(dev, on_localhost(site, "healthy.json"))
    assert site.most_waiting == 2  # so far: two fetches of the stalled host at once, the others wait
    pages = await asyncio.gather(*waiting)
    attacker.close()
    assert all(page.status == 400 and "did not answer within 5 seconds" in page.text for page in pages)


async def test_a_document_url_that_timed_out_is_not_fetched_again_for_a_minute(dev: TestServer, site: Site) -> None:
    url = site.publish("slow.json", document(), delay=6)
    assert "did not answer within 5 seconds" in await refused(dev, url)
    site.publish("slow.json", document())  # answers at once from now on
    assert "tries again 60 seconds after that" in await refused(dev, url)
    assert site.hits["slow.json"] == 1
    dev.clock.advance(61)
    await accepted(dev, url)
    assert site.hits["slow.json"] == 2


async def test_concurrent_requests_for_one_document_share_one_fetch(dev: TestServer, site: Site) -> None:
    url = site.publish("popular.json", document(), delay=0.5)
    pages = await asyncio.gather(*(PageSession(dev).get(request_url(url)) for _ in range(5)))
    assert [page.status for page in pages] == [200] * 5
    assert site.hits["popular.json"] == 1


async def too_many(server: TestServer, client_id: str) -> None:
    page = await PageSession(server).get(request_url(client_id))
    assert page.status == 429, (page.status, page.text[:300])
    assert int(page.response.headers["Retry-After"]) > 0 and page.login_form() is None


async def test_fetches_are_limited_per_caller_address(tmp_path: Path, database_url: str, site: Site) -> None:
    server = await start_server(tmp_path, database_url, env="development", outbound_ca_file=str(site.ca),
                                rate_limits="document-address=3/60")
    try:
        cached = site.publish("cached.json", document(), headers={"Cache-Control": "max-age=600"})
        for _ in range(4):
            await accepted(server, cached)  # one fetch: a stored copy costs nothing
        await accepted(server, site.publish("a.json", document()))
        await accepted(server, site.publish("b.json", document()))
        await too_many(server, site.publish("c.json", document()))
        assert site.hits["c.json"] == 0
        await accepted(server, cached)
        server.clock.advance(60)
        await accepted(server, site.publish("c.json", document()))
    finally:
        server.client.close()
        await server.running.stop()


async def test_fetches_are_limited_per_host(tmp_path: Path, database_url: str, site: Site) -> None:
    server = await start_server(tmp_path, database_url, env="development", outbound_ca_file=str(site.ca),
                                rate_limits="document-host=2/60")
    try:
        await accepted(server, site.publish("a.json", document()))
        await accepted(server, site.publish("b.json", document(), https=False))  # 127.0.0.1 on another port
        await too_many(server, site.publish("c.json", document()))
        await accepted(server, on_localhost(site, "d.json"))
    finally:
        server.client.close()
        await server.running.stop()


async def test_nothing_is_stored_for_a_redirect_uri_the_document_does_not_list(dev: TestServer,
                                                                               site: Site) -> None:
    url = site.publish("agent.json", document())
    assert "redirect URI" in await refused(dev, url, "https://evil.example/callback")
    assert await document_apps(dev) == set()
    await accepted(dev, url)
    assert await document_apps(dev) == {url}


async def test_a_host_keeps_at_most_100_clients_no_user_approved(dev: TestServer, site: Site) -> None:
    urls_on_host = [site.publish(f"many/{n}.json", document()) for n in range(101)]
    for url in urls_on_host[:100]:
        await accepted(dev, url)
    assert "already has 100 clients that no user has approved" in await refused(dev, urls_on_host[100])
    await accepted(dev, on_localhost(site, "other.json"))  # another host
    await consent(dev, urls_on_host[0])  # shown to a user, not yet approved: still counts
    assert len(await document_apps(dev)) == 101


async def test_expired_clients_no_user_approved_are_removed(dev: TestServer, site: Site) -> None:
    lapsed = site.publish("lapsed.json", document(), headers={"Cache-Control": "max-age=60"})
    fresh = site.publish("fresh.json", document(), headers={"Cache-Control": "max-age=600"})
    approved = site.publish("approved.json", document(), headers={"Cache-Control": "max-age=60"})
    revoked = site.publish("revoked.json", document(), headers={"Cache-Control": "max-age=60"})
    await accepted(dev, lapsed)
    await accepted(dev, fresh)
    user = await dev.create_user()
    for url in (approved, revoked):
        session, page = await consent(dev, url, user=user)
        assert (await session.decide(page, "approve")).status in (302, 303)
    token = await dev.login(user["email"], user["password"])
    assert (await dev.client.request("DELETE", "/api/auth/authorizations/" + quote(revoked, safe=""),
                                     bearer=token)).status == 200
    assert await dev.services.client_documents.remove_unapproved() == 0  # nothing expired yet
    dev.clock.advance(61)
    assert await dev.services.client_documents.remove_unapproved() == 1
    assert await document_apps(dev) == {fresh, approved, revoked}  # a user approved those two once
    await accepted(dev, lapsed)  # fetched and stored again when next named
    assert site.hits["lapsed.json"] == 2


@pytest.mark.parametrize("client_id", ["https://a%EF%BC%8Fb/x", "https://agent.example%EF%BC%9A8443/x"])
async def test_a_client_id_whose_host_changes_under_nfkc_is_a_400(dev: TestServer, client_id: str) -> None:
    """`urlsplit` raises ValueError for such hosts: it was a 500 with a traceback."""
    page = await PageSession(dev).get(
        f"/oauth/?response_type=code&client_id={client_id}&redirect_uri={CALLBACK}&scope=userinfo"
        f"&code_challenge={pkce_pair()[1]}&code_challenge_method=S256")
    assert page.status == 400, (page.status, page.text[:300])


# ---- the rules as tables -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("client_id", "production", "development"), [
    ("https://agent.example/client.json", True, True),
    ("https://agent.example/a/b?x=1", True, True),
    ("https://agent.example:8443/client", True, True),
    ("https://agent.example", False, False),
    ("https://agent.example/", False, False),
    ("https://agent.example/client#frag", False, False),
    ("https://user@agent.example/client", False, False),
    ("https://user:pw@agent.example/client", False, False),
    ("https://agent.example/a/../client", False, False),
    ("https://agent.example/./client", False, False),
    ("https://agent.example/a/%2e%2e/client", False, False),
    ("https://agent.example/a/..", False, False),
    ("https://agent.example:99999/client", False, False),
    ("http://agent.example/client", False, False),
    ("http://localhost:8080/client.json", False, True),
    ("http://127.0.0.1:8080/client.json", False, True),
    ("http://localhost/client.json", False, False),
    ("http://[::1]:8080/client.json", False, False),
    ("http://localhost.evil.example:8080/client", False, False),
    ("cid_0123456789", False, False),
    ("https://agent.example/cli ent", False, False),
    ("https://agent\uff0fexample/client", False, False),  # a host that changes under NFKC
    ("https://agent.example\uff1a8443/client", False, False),
])
def test_which_client_ids_name_a_document(client_id: str, production: bool, development: bool) -> None:
    assert is_document_url(client_id, development=False) is production
    assert is_document_url(client_id, development=True) is development


@pytest.mark.parametrize(("address", "public"), [
    ("8.8.8.8", True), ("1.1.1.1", True), ("2606:4700:4700::1111", True), ("2001:4860:4860::8888", True),
    ("::ffff:8.8.8.8", True),
    ("127.0.0.1", False), ("127.255.0.1", False), ("0.0.0.0", False), ("0.1.2.3", False),  # noqa: S104
    ("10.0.0.1", False), ("172.16.5.4", False), ("192.168.1.1", False), ("100.64.0.1", False),
    ("100.127.255.254", False), ("169.254.169.254", False), ("192.0.0.9", False), ("192.0.0.170", False),
    ("192.0.2.1", False), ("198.51.100.7", False), ("203.0.113.9", False), ("198.18.0.1", False),
    ("192.88.99.1", False), ("224.0.0.1", False), ("239.255.255.250", False), ("240.0.0.1", False),
    ("255.255.255.255", False),
    ("::", False), ("::1", False), ("::ffff:127.0.0.1", False), ("::ffff:10.0.0.1", False),
    ("::ffff:169.254.169.254", False), ("::ffff:0:7f00:1", False), ("::127.0.0.1", False),
    ("64:ff9b::a00:1", False), ("64:ff9b::808:808", False), ("64:ff9b:1::1", False), ("100::1", False),
    ("2001::1", False), ("2001:0:4136:e378:8000:63bf:3fff:fdd2", False), ("2001:db8::1", False),
    ("2002:7f00:1::1", False), ("2002:808:808::1", False), ("3fff::1", False), ("fc00::1", False),
    ("fd12:3456::1", False), ("fe80::1", False), ("fe80::1%1", False), ("fec0::1", False), ("ff02::1", False),
    ("ff0e::1", False), ("5f00::1", False),
])
def test_the_address_guard(address: str, public: bool) -> None:
    assert urls.is_public_address(ipaddress.ip_address(address)) is public
    assert urls.is_forbidden_address(address) is not public
    loopback = ipaddress.ip_address(address.split("%")[0])
    mapped_loopback = isinstance(loopback, ipaddress.IPv6Address) and loopback.ipv4_mapped is not None \
        and loopback.ipv4_mapped.is_loopback
    allowed_in_development = public or loopback.is_loopback or mapped_loopback
    assert urls.is_forbidden_address(address, allow_loopback=True) is not allowed_in_development


async def test_the_resolver_guards_every_connection() -> None:
    with pytest.raises(ForbiddenAddress):
        await PublicOnlyResolver().resolve("localhost", 443)
    with pytest.raises(ForbiddenAddress):
        await PublicOnlyResolver(allow_loopback=True).resolve("10.1.2.3", 443)
    resolved = await PublicOnlyResolver(allow_loopback=True).resolve("127.0.0.1", 443)
    assert [address[1][0] for address in resolved] == ["127.0.0.1"]


def test_the_outbound_ca_file_must_hold_certificates(tmp_path: Path, site: Site) -> None:
    from lbauth import settings
    assert settings.load(environ={"LBAUTH_OUTBOUND_CA_FILE": str(site.ca)}).outbound_ca_file == site.ca
    assert settings.load(environ={"LBAUTH_OUTBOUND_CA_FILE": ""}).outbound_ca_file is None
    (tmp_path / "empty.pem").write_text("no certificate here")
    for path in (tmp_path / "missing.pem", tmp_path / "empty.pem"):
        with pytest.raises(settings.SettingsError, match="LBAUTH_OUTBOUND_CA_FILE"):
            settings.load(environ={"LBAUTH_OUTBOUND_CA_FILE": str(path)})
