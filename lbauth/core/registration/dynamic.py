"""Dynamic client registration (RFC 7591) with RFC 7592 read and delete (contract 17).

A client posts its metadata and becomes an app with no owner (`registration` dynamic): public
(`token_endpoint_auth_method` none, no secret) or confidential (a client secret, shown this once).
It gets a registration access token with which it may read its registration and delete it.

Decisions the contract leaves open:
- `scope` is the app's default for a request without `scope`, never a ceiling: a self-registered
  app may ask for every scope (the MCP SDKs widen scopes on step-up without registering again).
  Values this server does not know are ignored, not refused.
- `grant_types` may hold `authorization_code` (required) and `refresh_token`; `response_types` only
  `code`. Every grant gets a refresh token whatever `grant_types` says.
- Fields RFC 7591 defines that this server does not use (`contacts`, `jwks_uri`, `software_id`...)
  are ignored, as RFC 7591 2 asks of unknown ones, and not echoed.
- A read (RFC 7592 2.1) does not show the client secret again: only its digest is kept.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from lbauth.clock import Clock
from lbauth.core import scopes, urls
from lbauth.core.clients.apps import webhook_secret_purpose
from lbauth.core.crypto import opaque
from lbauth.core.crypto.keys import ID_TOKEN_DEFAULT_ALG
from lbauth.core.crypto.masterkey import MasterKeys
from lbauth.core.oauth.checklist import cover_racing_tokens
from lbauth.core.oauth.client_auth import PUBLIC_SECRET_DIGEST
from lbauth.core.oauth.grant_revocation import suspend_grant_in
from lbauth.errors import ClientMetadataInvalid, RedirectUriInvalid, TokenInvalid, ValidationFailed
from lbauth.storage import Connection
from lbauth.storage.db import Database
from lbauth.storage.records import PUBLIC_CLIENT_METHOD, App
from lbauth.storage.repo import apps as apps_repo
from lbauth.storage.repo import changes as changes_repo
from lbauth.storage.repo import registration as repo
from lbauth.verify import CheckList

DYNAMIC = "dynamic"
CONFIDENTIAL_METHODS = ("client_secret_basic", "client_secret_post")
GRANT_TYPES = ("authorization_code", "refresh_token")
APPLICATION_TYPES = ("web", "native")
DEFAULT_NAME = "Unnamed app (registered itself)"
MAX_NAME = 200
MAX_REDIRECT_URIS = 20
MAX_SCOPE_LENGTH = 1000
_DUMMY_DIGEST = opaque.digest("lbauth: no such registration")


@dataclass(frozen=True)
class Metadata:
    """Registered client metadata (RFC 7591 2), validated; `as_stored` is what the app keeps."""
    redirect_uris: list[str]
    token_endpoint_auth_method: str
    grant_types: list[str]
    response_types: list[str]
    application_type: str
    client_name: str | None
    scope: str | None
    client_uri: str | None
    logo_uri: str | None

    @property
    def public(self) -> bool:
        return self.token_endpoint_auth_method == PUBLIC_CLIENT_METHOD

    def as_stored(self) -> dict[str, Any]:
        stored = {"redirect_uris": self.redirect_uris, "token_endpoint_auth_method": self.token_endpoint_auth_method,
                  "grant_types": self.grant_types, "response_types": self.response_types,
                  "application_type": self.application_type, "client_name": self.client_name,
                  "scope": self.scope, "client_uri": self.client_uri, "logo_uri": self.logo_uri}
        return {name: value for name, value in stored.items() if value is not None}


def parse_metadata(document: Any) -> Metadata:
    """RFC 7591 2 and 3.2.2: the metadata of a registration request, or ClientMetadataInvalid
    (RedirectUriInvalid for a redirect URI) naming what is wrong."""
    if not isinstance(document, dict):
        raise ClientMetadataInvalid("The registration request must be a JSON object.")
    document = {name: value for name, value in document.items() if value is not None}  # null: absent
    if "sector_identifier_uri" in document:
        raise ClientMetadataInvalid("sector_identifier_uri is not supported.")
    if document.get("subject_type", "pairwise") != "pairwise":
        raise ClientMetadataInvalid("subject_type must be pairwise: every app sees its own user ids.")
    method = document.get("token_endpoint_auth_method", "client_secret_basic")
    if method != PUBLIC_CLIENT_METHOD and method not in CONFIDENTIAL_METHODS:
        raise ClientMetadataInvalid("token_endpoint_auth_method must be none, client_secret_basic "
                                    "or client_secret_post.")
    grant_types = _strings(document, "grant_types", ["authorization_code", "refresh_token"])
    if any(g not in GRANT_TYPES for g in grant_types) or "authorization_code" not in grant_types:
        raise ClientMetadataInvalid("grant_types must hold authorization_code, and may hold refresh_token.")
    response_types = _strings(document, "response_types", ["code"])
    if set(response_types) != {"code"}:
        raise ClientMetadataInvalid("response_types must be [\"code\"].")
    application_type = document.get("application_type", "web")
    if application_type not in APPLICATION_TYPES:
        raise ClientMetadataInvalid("application_type must be web or native.")
    return Metadata(
        redirect_uris=_redirect_uris(document.get("redirect_uris")), token_endpoint_auth_method=method,
        grant_types=list(dict.fromkeys(grant_types)), response_types=["code"], application_type=application_type,
        client_name=_name(document.get("client_name")), scope=_scope(document.get("scope")),
        client_uri=_web_url(document, "client_uri"), logo_uri=_web_url(document, "logo_uri"))


def _strings(document: dict[str, Any], name: str, default: list[str]) -> list[str]:
    value = document.get(name, default)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ClientMetadataInvalid(f"{name} must be a non-empty array of strings.")
    return value


def _redirect_uris(value: Any) -> list[str]:
    """RFC 7591 2, contract 17: https, loopback http, or a private-use scheme (RFC 8252 7.1); never
    a fragment. Development allows no more than production: strangers register here."""
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise RedirectUriInvalid("redirect_uris must be a non-empty array of URIs.")
    if len(value) > MAX_REDIRECT_URIS:
        raise RedirectUriInvalid(f"At most {MAX_REDIRECT_URIS} redirect URIs may be registered.")
    checked = []
    for uri in value:
        try:
            checked.append(urls.check_redirect_uri(uri, development=False))
        except ValidationFailed as error:
            raise RedirectUriInvalid(error.message) from None
    return list(dict.fromkeys(checked))


def _name(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value.strip()) > MAX_NAME \
            or not value.strip().isprintable():
        raise ClientMetadataInvalid(f"client_name must be 1 to {MAX_NAME} printable characters.")
    return value.strip()


def _scope(value: Any) -> str | None:
    """The known scopes of a space-separated `scope`, in the order sent; unknown values ignored."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_SCOPE_LENGTH:
        raise ClientMetadataInvalid(f"scope must be a string of at most {MAX_SCOPE_LENGTH} characters.")
    known = [s for s in dict.fromkeys(value.split()) if s in scopes.SCOPES]
    return " ".join(known) or None


def _web_url(document: dict[str, Any], name: str) -> str | None:
    """An http(s) page of the client's (`client_uri`, `logo_uri`): never `javascript:` and the like."""
    value = document.get(name)
    if value is None:
        return None
    try:
        if not isinstance(value, str) or "#" in value:
            raise ValueError(name)
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.username is not None \
                or len(value) > urls.MAX_URL_LENGTH or not value.isprintable() or " " in value:
            raise ValueError(name)
    except ValueError:
        raise ClientMetadataInvalid(f"{name} must be an absolute http(s) URL without a fragment.") from None
    return value


# ---- registering, reading, deleting --------------------------------------------------------------------

async def register(db: Database, clock: Clock, keys: MasterKeys, metadata: Metadata, *,
                   base_url: str) -> dict[str, Any]:
    """RFC 7591 3.2.1: the new app's client information, with its registration access token (RFC 7592
    3) and, for a confidential client, its secret: both shown this once, kept only as digests."""
    app_id, client_id = opaque.new_id("app_"), opaque.new_id("cid_")
    secret = None if metadata.public else opaque.new_secret(opaque.CLIENT_SECRET)
    access_token = opaque.new_secret(opaque.REGISTRATION_ACCESS_TOKEN)
    # No webhook, but every app holds a sealed webhook secret (master key rotation reseals them all).
    webhook_secret = opaque.new_secret(opaque.WEBHOOK_SECRET)
    now = int(clock.now())
    name = metadata.client_name or DEFAULT_NAME

    def work(conn: Connection) -> App:
        repo.insert_dynamic_app(
            conn, app_id=app_id, client_id=client_id, name=name,
            client_secret_hash=PUBLIC_SECRET_DIGEST if secret is None else opaque.digest(secret),
            redirect_uris=metadata.redirect_uris, scopes=list(scopes.ALL),
            webhook_secret_sealed=keys.seal(webhook_secret.encode(), webhook_secret_purpose(app_id)), now=now,
            id_token_alg=ID_TOKEN_DEFAULT_ALG, token_endpoint_auth_method=metadata.token_endpoint_auth_method,
            registration_token_hash=opaque.digest(access_token), client_metadata=metadata.as_stored())
        app = apps_repo.by_client_id(conn, client_id)
        assert app is not None  # inserted just now, in this transaction
        return app

    app = await db.transaction(work)
    information = client_information(app, base_url)
    information["registration_access_token"] = access_token
    if secret is not None:
        information["client_secret"] = secret
        information["client_secret_expires_at"] = 0  # RFC 7591 3.2.1: never expires
    return information


def client_information(app: App, base_url: str) -> dict[str, Any]:
    """RFC 7591 3.2.1 / RFC 7592 3: every registered field, without the secrets."""
    stored = app.client_metadata or {}
    information: dict[str, Any] = {
        "client_id": app.client_id,
        "client_id_issued_at": app.created_at,
        "redirect_uris": list(app.redirect_uris),
        "grant_types": list(stored.get("grant_types", GRANT_TYPES)),
        "response_types": list(stored.get("response_types", ["code"])),
        "token_endpoint_auth_method": app.token_endpoint_auth_method,
        "client_name": app.name,
        "scope": " ".join(app.default_scopes),
        "application_type": stored.get("application_type", "web"),
        "registration_client_uri": registration_client_uri(base_url, app.client_id),
    }
    for optional in ("client_uri", "logo_uri"):
        if stored.get(optional):
            information[optional] = stored[optional]
    return information


def registration_client_uri(base_url: str, client_id: str) -> str:
    return f"{base_url}/oauth/register/{client_id}"


def _registered(conn: Connection, client_id: str, access_token: str) -> App:
    """RFC 7592 2: the app this registration access token manages; TokenInvalid (401) otherwise,
    alike for an unknown client and a wrong token, after the same constant-time comparison."""
    app = apps_repo.by_client_id(conn, client_id)
    stored = app.registration_token_hash if app is not None and app.registration == DYNAMIC else None
    presented = opaque.digest(access_token) if isinstance(access_token, str) else ""
    if not hmac.compare_digest(presented, stored or _DUMMY_DIGEST) or app is None or stored is None:
        raise TokenInvalid("The registration access token is invalid for this client.")
    return app


async def read(db: Database, client_id: str, access_token: str, *, base_url: str) -> dict[str, Any]:
    """RFC 7592 2.1."""
    return client_information(await db.read(_registered, client_id, access_token), base_url)


async def delete(db: Database, clock: Clock, checklist: CheckList, client_id: str, access_token: str, *,
                 access_ttl: int) -> None:
    """RFC 7592 2.3: the app is deleted, and with it its grants, codes and refresh tokens; its
    grants go on the revocation check-list, so the access tokens already issued stop working."""
    now = int(clock.now())

    def work(conn: Connection) -> Sequence[str]:
        app = _registered(conn, client_id, access_token)
        grant_ids = repo.live_grant_ids_of_app(conn, app.id)
        for grant_id in grant_ids:
            suspend_grant_in(conn, clock, grant_id, now, access_ttl)
        repo.delete_app(conn, app.id)
        changes_repo.notify(conn)
        return grant_ids

    for grant_id in await db.transaction(work):
        await cover_racing_tokens(db, clock, checklist, grant_id, now, access_ttl)
