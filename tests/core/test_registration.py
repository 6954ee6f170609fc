"""Apps that register themselves (lbauth/core/registration): RFC 7591 registration with RFC 7592 read
and delete, and client ID metadata documents fetched through a fake fetcher and cached; on a
temporary SQLite file with the frozen clock, no HTTP. Each way keeps its own errors."""

from __future__ import annotations

import pytest

from lbauth import errors
from lbauth.core.accounts import users
from lbauth.core.registration.documents import (
    MAX_CACHE_SECONDS,
    ClientDocuments,
    DocumentUnavailable,
    FetchedDocument,
)
from lbauth.services import Services
from lbauth.storage.records import Registration
from lbauth.storage.repo import apps as apps_repo

CALLBACK = "https://agent.example/cb"
URL = "https://agent.example/client.json"


# ---- RFC 7591 and RFC 7592 ------------------------------------------------------------------------------

@pytest.mark.parametrize(("document", "error"), [
    ([], errors.ClientMetadataInvalid),
    ({"redirect_uris": []}, errors.RedirectUriInvalid),
    ({"redirect_uris": ["https://a.example/cb#x"]}, errors.RedirectUriInvalid),
    ({"redirect_uris": [CALLBACK], "token_endpoint_auth_method": "private_key_jwt"}, errors.ClientMetadataInvalid),
    ({"redirect_uris": [CALLBACK], "client_uri": "javascript:x"}, errors.ClientMetadataInvalid),
])
def test_a_refused_registration_is_its_rfc_7591_error(services, document, error):
    with pytest.raises(error) as caught:
        services.registration.parse(document)
    assert type(caught.value) is error and caught.value.message.endswith(".")


def test_registration_accepts_the_token_endpoints_methods_and_grants(services):
    """Built from the authorization server's registries, as the discovery document is."""
    assert services.registration.intake.auth_methods == ("client_secret_basic", "client_secret_post", "none")
    assert services.registration.intake.grant_types == tuple(services.oauth.grants)


async def test_a_registration_is_read_and_deleted_with_its_token(services):
    client = services.registration.parse({"redirect_uris": [CALLBACK], "client_name": "Agent", "scope": "voice",
                                          "token_endpoint_auth_method": "client_secret_post"})
    information = await services.registration.register(client)
    client_id, token = information["client_id"], information["registration_access_token"]
    assert information["client_secret"].startswith("lba_cs_") and information["client_secret_expires_at"] == 0
    app = await services.db.read(apps_repo.by_client_id, client_id)
    assert app is not None and app.registration == Registration.DYNAMIC and app.owner_id is None
    assert app.client_metadata == client.extensions() and app.default_scopes == ["voice"]
    read = await services.registration.read(client_id, token)
    assert read == {name: value for name, value in information.items()
                    if name not in ("registration_access_token", "client_secret", "client_secret_expires_at")}
    assert read["token_endpoint_auth_method"] == "client_secret_post" and read["scope"] == "voice"
    with pytest.raises(errors.TokenInvalid):
        await services.registration.read(client_id, "lba_rat_wrong")
    await services.registration.delete(client_id, token)
    assert await services.db.read(apps_repo.by_client_id, client_id) is None


async def test_a_public_registration_gets_no_secret(services):
    information = await services.registration.register(services.registration.parse(
        {"redirect_uris": [CALLBACK], "token_endpoint_auth_method": "none"}))
    assert "client_secret" not in information and information["token_endpoint_auth_method"] == "none"


async def test_an_operators_app_is_not_managed_by_a_registration_token(services):
    await users.create_user(services.db, services.clock, email="owner@example.com", name="O", password="plover kettle")
    app = await services.apps.create(name="Notes", owner_email="owner@example.com", redirect_uris=[CALLBACK])
    with pytest.raises(errors.TokenInvalid):
        await services.registration.read(app.client_id, "lba_rat_anything")


# ---- client ID metadata documents -----------------------------------------------------------------------

class FakeFetcher:
    def __init__(self) -> None:
        self.documents: dict[str, FetchedDocument | DocumentUnavailable] = {}
        self.fetches = 0

    async def fetch(self, url: str, now: float) -> FetchedDocument:
        self.fetches += 1
        answer = self.documents[url]
        if isinstance(answer, DocumentUnavailable):
            raise answer
        return answer


def documents_of(services: Services, fetcher: FakeFetcher) -> ClientDocuments:
    return ClientDocuments(services.db, services.clock, fetcher, lambda: services.master_keys, development=False,
                           grant_types=list(services.oauth.grants))


def document(**fields: object) -> dict:
    return {"client_id": URL, "redirect_uris": [CALLBACK], **fields}


async def test_a_document_registers_a_public_client_and_is_cached_as_it_says(services):
    fetcher = FakeFetcher()
    fetcher.documents[URL] = FetchedDocument(document(client_name="Agent", padding="x"), max_age=60)
    clients = documents_of(services, fetcher)
    app = await clients.app(URL)
    assert (app.registration, app.name, app.public, app.owner_id) == (Registration.DOCUMENT, "Agent", True, None)
    assert app.client_metadata == {"grant_types": ["authorization_code", "refresh_token"],
                                   "response_types": ["code"], "application_type": "web"}  # unknown fields dropped
    assert (await clients.app(URL)).id == app.id and fetcher.fetches == 1  # fresh: not fetched again
    services.clock.advance(61)
    fetcher.documents[URL] = FetchedDocument(document(redirect_uris=[CALLBACK + "2"]), max_age=10 ** 9)
    again = await clients.app(URL)
    assert fetcher.fetches == 2 and again.id == app.id  # the same row, updated
    assert (again.name, again.redirect_uris) == ("agent.example", [CALLBACK + "2"])
    assert again.document_expires_at == int(services.clock.now()) + MAX_CACHE_SECONDS


@pytest.mark.parametrize(("sent", "reason"), [
    (document(client_id="https://other.example/c.json"), "its client_id is not the URL"),
    (document(client_secret="s"), "it contains a client_secret"),
    (document(token_endpoint_auth_method="client_secret_basic"), "its token_endpoint_auth_method must be none"),
    (document(redirect_uris=[]), "its redirect_uris must be a non-empty array"),
    (document(redirect_uris=["javascript:alert(1)"]), "its redirect_uris hold 'javascript:alert(1)': redirect URI"),
    (document(redirect_uris=[7]), "its redirect_uris hold a non-string value"),
    (document(client_name=""), "its client_name must be 1 to 200"),
])
async def test_an_invalid_document_is_its_error_page_and_never_stored(services, sent, reason):
    fetcher = FakeFetcher()
    fetcher.documents[URL] = FetchedDocument(sent, max_age=60)
    with pytest.raises(errors.ClientDocumentInvalid) as caught:
        await documents_of(services, fetcher).app(URL)
    assert reason in caught.value.message
    assert await services.db.read(apps_repo.by_client_id, URL) is None


async def test_an_unavailable_document_names_why(services):
    fetcher = FakeFetcher()
    fetcher.documents[URL] = DocumentUnavailable("it answered HTTP 404, not 200")
    with pytest.raises(errors.ClientDocumentInvalid, match="404"):
        await documents_of(services, fetcher).app(URL)
