"""Client ID metadata documents (draft-ietf-oauth-client-id-metadata-document-01, contract 17): a
`client_id` that is an https URL names a JSON document, published by the client, that registers it.

The authorization endpoint loads such a client through `ClientDocuments.app`: the stored copy while
its HTTP caching says it is fresh (at most 24 h), else a new fetch through the injected `Fetcher`
(lbauth/outbound.py does the HTTP and the address guard; the core does not import Tornado). A
document that cannot be fetched or is not valid is never stored: the request ends on contract 5's
error page, which names what was wrong, and the next request fetches again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

from lbauth.clock import Clock
from lbauth.core import scopes, urls
from lbauth.core.clients.apps import webhook_secret_purpose
from lbauth.core.crypto import opaque
from lbauth.core.crypto.masterkey import MasterKeys
from lbauth.errors import ClientDocumentInvalid, ValidationFailed
from lbauth.storage import Connection, Duplicate
from lbauth.storage.db import Database
from lbauth.storage.records import PUBLIC_CLIENT_METHOD, App
from lbauth.storage.repo import apps as apps_repo
from lbauth.storage.repo import documents as documents_repo

DOCUMENT_TIMEOUT = 5  # seconds for the whole fetch
DOCUMENT_MAX_BYTES = 5 * 1024
MAX_CACHE_SECONDS = 24 * 3600
MAX_URL_LENGTH = 2048  # apps.client_id
MAX_NAME_LENGTH = 200  # apps.name
REGISTRATION = "document"


class DocumentUnavailable(Exception):
    """The fetcher got no usable answer; `reason` completes "The client's metadata document ..."."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class FetchedDocument:
    """A 200 answer's JSON object, and how many seconds its HTTP caching lets it be used (0: none)."""
    document: dict[str, Any]
    max_age: int


class Fetcher(Protocol):
    async def fetch(self, url: str, now: float) -> FetchedDocument:
        """GET `url` as the draft says, or raise DocumentUnavailable."""
        ...


def is_document_url(client_id: Any, *, development: bool) -> bool:
    """A client id naming its own metadata document (draft section 3): `https`, a host, a path other
    than `/`, no fragment, no user-info, no `.` or `..` segment. In development also
    `http://localhost:PORT/...` and `http://127.0.0.1:PORT/...` (contract 17)."""
    if not isinstance(client_id, str) or len(client_id) > MAX_URL_LENGTH or not client_id.isprintable() \
            or " " in client_id or "\\" in client_id or "#" in client_id:
        return False
    parts = urlsplit(client_id)
    try:
        port = parts.port
    except ValueError:
        return False
    if "@" in parts.netloc or not parts.hostname or parts.path in ("", "/"):
        return False
    if any(unquote(segment) in (".", "..") for segment in parts.path.split("/")):
        return False
    if parts.scheme == "https":
        return True
    return (development and parts.scheme == "http" and parts.hostname in ("localhost", "127.0.0.1")
            and port is not None and parts.netloc.lower() == f"{parts.hostname}:{port}")


@dataclass(frozen=True)
class DocumentClient:
    """What a valid document registers."""
    name: str
    redirect_uris: list[str]
    metadata: dict[str, Any]


def validate(url: str, document: dict[str, Any], *, development: bool) -> DocumentClient:
    """The draft's section 4.1 checks and contract 17's: `client_id` equal to the URL (simple string
    comparison), a public client (`token_endpoint_auth_method` absent or `none`, no `client_secret`),
    redirect URIs as a registration's (contract 5). Raises ClientDocumentInvalid naming the problem."""
    if document.get("client_id") != url:
        raise ClientDocumentInvalid.because("its client_id is not the URL it was fetched from")
    if "client_secret" in document or "client_secret_expires_at" in document:
        raise ClientDocumentInvalid.because("it contains a client_secret; such a client must be public")
    method = document.get("token_endpoint_auth_method", PUBLIC_CLIENT_METHOD)
    if method != PUBLIC_CLIENT_METHOD:
        raise ClientDocumentInvalid.because("its token_endpoint_auth_method must be none (or absent)")
    redirect_uris = document.get("redirect_uris")
    if not isinstance(redirect_uris, list) or not redirect_uris:
        raise ClientDocumentInvalid.because("its redirect_uris must be a non-empty array")
    for uri in redirect_uris:
        try:
            urls.check_redirect_uri(uri, development=development)
        except ValidationFailed as error:
            shown = repr(uri)[:120] if isinstance(uri, str) else "a non-string value"
            raise ClientDocumentInvalid.because(f"its redirect_uris hold {shown}: {error.message}") from None
    name = document.get("client_name")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ClientDocumentInvalid.because("its client_name must be a non-empty string")
    client_uri = document.get("client_uri")
    if client_uri is not None and not _web_url(client_uri, development=development):
        raise ClientDocumentInvalid.because("its client_uri must be an https URL")
    scope = document.get("scope")
    if scope is not None and not isinstance(scope, str):
        raise ClientDocumentInvalid.because("its scope must be a string of space-separated scopes")
    host = urlsplit(url).hostname or url
    return DocumentClient(name=(name.strip() if name else host)[:MAX_NAME_LENGTH], redirect_uris=list(redirect_uris),
                          metadata=dict(document))


def _web_url(value: Any, *, development: bool) -> bool:
    if not isinstance(value, str) or len(value) > MAX_URL_LENGTH or not value.isprintable() or " " in value:
        return False
    parts = urlsplit(value)
    return bool(parts.hostname) and "@" not in parts.netloc and (
        parts.scheme == "https" or (development and parts.scheme == "http"))


class ClientDocuments:
    """Metadata-document clients as app rows (`registration='document'`, public, no owner, every
    scope; the document's `scope` kept in `client_metadata` as the default, never a ceiling)."""

    def __init__(self, db: Database, clock: Clock, fetcher: Fetcher, master_keys: Callable[[], MasterKeys], *,
                 development: bool) -> None:
        self.db, self.clock, self.fetcher = db, clock, fetcher
        self.master_keys = master_keys
        self.development = development

    def names_document(self, client_id: Any) -> bool:
        return is_document_url(client_id, development=self.development)

    async def app(self, url: str) -> App:
        """The client the document at `url` registers: the stored copy while fresh, else fetched,
        validated and stored anew. Raises ClientDocumentInvalid (contract 5's error page)."""
        now = int(self.clock.now())
        stored = await self.db.read(apps_repo.by_client_id, url)
        if stored is not None and (stored.registration != REGISTRATION or (stored.document_expires_at or 0) > now):
            return stored
        try:
            fetched = await self.fetcher.fetch(url, self.clock.now())
        except DocumentUnavailable as failure:
            raise ClientDocumentInvalid.because(failure.reason) from None
        client = validate(url, fetched.document, development=self.development)
        expires_at = now + max(0, min(fetched.max_age, MAX_CACHE_SECONDS))
        for attempt in range(2):
            try:
                return await self.db.transaction(self._store, url, client, expires_at, now)
            except Duplicate:  # a concurrent request stored it first: update that row
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _store(self, conn: Connection, url: str, client: DocumentClient, expires_at: int, now: int) -> App:
        if not documents_repo.update_document_app(conn, client_id=url, name=client.name,
                                                  redirect_uris=client.redirect_uris, metadata=client.metadata,
                                                  expires_at=expires_at, now=now):
            app_id = opaque.new_id("app_")
            webhook_secret = opaque.new_secret(opaque.WEBHOOK_SECRET)  # unused; sealed like every app's
            documents_repo.insert_document_app(
                conn, app_id=app_id, client_id=url, name=client.name, redirect_uris=client.redirect_uris,
                scopes=list(scopes.ALL), metadata=client.metadata, expires_at=expires_at, now=now,
                webhook_secret_sealed=self.master_keys().seal(webhook_secret.encode(), webhook_secret_purpose(app_id)))
        app = apps_repo.by_client_id(conn, url)
        assert app is not None
        return app
