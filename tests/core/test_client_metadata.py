"""The one client model (lbauth/core/clients/metadata.py): every way of registering is an Intake of
the same validation, which refuses a field with a reason; no database, no HTTP."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lbauth import errors
from lbauth.core.clients import apps, metadata
from lbauth.core.clients.metadata import EntryRefused, Intake, MetadataRefused
from lbauth.core.registration import documents, dynamic
from lbauth.storage.records import App, ClientMetadata, Registration

OPERATOR = apps.intake(apps.AppPolicy(development=False))
DYNAMIC = dynamic.intake(["client_secret_basic", "client_secret_post", "none"],
                         ["authorization_code", "refresh_token"])
DOCUMENT = documents.intake("https://agent.example/client.json", development=False)
CALLBACK = "https://agent.example/cb"


def refused(document: dict, intake: Intake = DYNAMIC) -> MetadataRefused:
    with pytest.raises(MetadataRefused) as caught:
        metadata.validate(document, intake)
    return caught.value


# ---- defaults -----------------------------------------------------------------------------------------------

def test_a_dynamic_client_takes_the_rfc_7591_defaults():
    client = metadata.validate({"redirect_uris": [CALLBACK]}, DYNAMIC)
    assert client == ClientMetadata(
        Registration.DYNAMIC, name=dynamic.DEFAULT_NAME, redirect_uris=[CALLBACK],
        token_endpoint_auth_method="client_secret_basic", scopes=list(metadata.scopes.ALL),
        grant_types=["authorization_code", "refresh_token"], response_types=["code"], application_type="web")
    assert not client.public


def test_a_document_client_is_public_and_named_by_its_host():
    client = metadata.validate({"redirect_uris": [CALLBACK]}, DOCUMENT)
    assert (client.registration, client.name, client.public) == (Registration.DOCUMENT, "agent.example", True)


def test_null_is_an_absent_field():
    assert metadata.validate({"redirect_uris": [CALLBACK], "client_name": None}, DYNAMIC).name == dynamic.DEFAULT_NAME


def test_an_operator_app_needs_a_name():
    assert refused({"redirect_uris": [CALLBACK]}, OPERATOR).field == "client_name"


def test_the_operator_fields_are_read_only_from_the_operator():
    """A stranger cannot set the allowed scopes, a webhook or the ID-token algorithm."""
    sent = {"redirect_uris": [CALLBACK], "client_name": "A", "scopes": ["voice"],
            "webhook_url": "https://hooks.example/x", "id_token_alg": "ES256"}
    stranger = metadata.validate(sent, DYNAMIC)
    assert (stranger.scopes, stranger.webhook_url, stranger.id_token_alg) == (list(metadata.scopes.ALL), None, "RS256")
    operator = metadata.validate(sent, OPERATOR)
    assert (operator.scopes, operator.webhook_url, operator.id_token_alg) == (["voice"], "https://hooks.example/x",
                                                                              "ES256")


# ---- what each field accepts --------------------------------------------------------------------------------

@pytest.mark.parametrize(("document", "field"), [
    ({"sector_identifier_uri": "https://a.example/s"}, "sector_identifier_uri"),
    ({"subject_type": "public"}, "subject_type"),
    ({"token_endpoint_auth_method": "private_key_jwt"}, "token_endpoint_auth_method"),
    ({"grant_types": ["refresh_token"]}, "grant_types"),
    ({"grant_types": ["authorization_code", "implicit"]}, "grant_types"),
    ({"grant_types": []}, "grant_types"),
    ({"response_types": ["token"]}, "response_types"),
    ({"application_type": "desktop"}, "application_type"),
    ({"redirect_uris": []}, "redirect_uris"),
    ({"redirect_uris": CALLBACK}, "redirect_uris"),
    ({"redirect_uris": [f"{CALLBACK}/{n}" for n in range(21)]}, "redirect_uris"),
    ({"client_name": ""}, "client_name"),
    ({"client_name": "x" * 201}, "client_name"),
    ({"client_name": "a\nb"}, "client_name"),
    ({"scope": ["userinfo"]}, "scope"),
    ({"client_uri": "javascript:alert(1)"}, "client_uri"),
    ({"logo_uri": "https://agent.example/logo.png#x"}, "logo_uri"),
    ({"client_uri": "https://user@agent.example/"}, "client_uri"),
])
def test_a_refusal_names_the_field(document, field):
    refusal = refused({"redirect_uris": [CALLBACK], **document})
    assert refusal.field == field and refusal.message().startswith(field)


@pytest.mark.parametrize("uri", ["javascript:alert(1)", "https://a.example/cb#x", "http://a.example/cb", 7])
def test_a_refused_redirect_uri_is_an_entry_with_its_own_sentence(uri):
    refusal = refused({"redirect_uris": [CALLBACK, uri]})
    assert isinstance(refusal, EntryRefused) and refusal.entry == uri
    assert refusal.message() == refusal.reason and refusal.reason.startswith("redirect URI must")


def test_development_allows_http_redirect_uris_where_the_intake_says():
    uri = "http://app.example/cb"
    operator = replace(OPERATOR, development=True)
    assert metadata.validate({"client_name": "A", "redirect_uris": [uri]}, operator).redirect_uris == [uri]
    assert isinstance(refused({"redirect_uris": [uri]}, DYNAMIC), EntryRefused)  # strangers: never


def test_the_accepted_methods_and_grants_are_the_intakes():
    assert refused({"redirect_uris": [CALLBACK], "token_endpoint_auth_method": "client_secret_basic"},
                   DOCUMENT).message() == "token_endpoint_auth_method must be none"
    assert refused({"redirect_uris": [CALLBACK], "grant_types": ["implicit"]}).message() == \
        "grant_types must hold authorization_code, and may hold refresh_token"
    device = "urn:ietf:params:oauth:grant-type:device_code"
    with_device = replace(DYNAMIC, grant_types=(*DYNAMIC.grant_types, device))
    assert metadata.validate({"redirect_uris": [CALLBACK], "grant_types": ["authorization_code", device]},
                             with_device).grant_types == ["authorization_code", device]


def test_redirect_uris_and_grant_types_lose_repeats_and_scope_its_unknown_values():
    client = metadata.validate({"redirect_uris": [CALLBACK, CALLBACK], "scope": "voice offline_access voice userinfo",
                                "grant_types": ["authorization_code", "authorization_code"]}, DYNAMIC)
    assert (client.redirect_uris, client.scope, client.grant_types) == ([CALLBACK], "voice userinfo",
                                                                        ["authorization_code"])
    assert metadata.validate({"redirect_uris": [CALLBACK], "scope": "unknown"}, DYNAMIC).scope is None


def test_an_unknown_allowed_scope_is_scope_invalid():
    with pytest.raises(errors.ScopeInvalid):
        metadata.validate({"client_name": "A", "redirect_uris": [CALLBACK], "scopes": ["everything"]}, OPERATOR)


def test_an_empty_webhook_url_is_none_and_a_bad_one_an_entry():
    assert metadata.validate({"client_name": "A", "redirect_uris": [CALLBACK], "webhook_url": ""},
                             OPERATOR).webhook_url is None
    refusal = refused({"client_name": "A", "redirect_uris": [CALLBACK], "webhook_url": "http://hooks.example/"},
                      OPERATOR)
    assert isinstance(refusal, EntryRefused) and refusal.field == "webhook_url"


def test_check_checks_only_the_fields_named():
    """A change of settings: only what changes is checked, by its record attribute."""
    assert metadata.check({"client_name": " Renamed "}, OPERATOR, ["client_name"]) == {"name": "Renamed"}
    with pytest.raises(MetadataRefused):
        metadata.check({"id_token_alg": "HS256"}, OPERATOR, ["id_token_alg"])


# ---- the record ---------------------------------------------------------------------------------------------

def test_extensions_are_the_fields_without_a_column_and_of_reads_them_back():
    client = metadata.validate({"redirect_uris": [CALLBACK], "client_name": "Agent", "scope": "voice",
                                "client_uri": "https://agent.example/", "application_type": "native"}, DYNAMIC)
    assert client.extensions() == {"grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
                                   "application_type": "native", "scope": "voice",
                                   "client_uri": "https://agent.example/"}
    app = App(id="app_1", client_id="cid_1", name=client.name, owner_id=None, client_secret_hash="",
              redirect_uris=client.redirect_uris, scopes=client.scopes, webhook_url=None, webhook_secret_sealed="x",
              webhook_disabled_at=None, created_at=1, updated_at=1, id_token_alg=client.id_token_alg,
              post_logout_redirect_uris=[], token_endpoint_auth_method=client.token_endpoint_auth_method,
              registration=client.registration.value, registration_token_hash=None,
              client_metadata=client.extensions(), document_expires_at=None, owner_email=None)
    assert ClientMetadata.of(app) == client
    assert ClientMetadata.of(replace(app, client_metadata=None)).grant_types == ["authorization_code", "refresh_token"]


def test_registration_kinds_are_the_column_values():
    assert [kind.value for kind in Registration] == ["operator", "dynamic", "document"]
    assert Registration.DOCUMENT == "document"
