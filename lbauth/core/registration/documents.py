"""Client ID metadata documents (draft-ietf-oauth-client-id-metadata-document-01, contract 17): a
`client_id` that is an https URL names a JSON document, published by the client, that registers it.

The authorization endpoint loads such a client through `ClientDocuments.app`: the stored copy while
its HTTP caching says it is fresh (at most 24 h), else a new fetch through the injected `Fetcher`
(lbauth/outbound.py does the HTTP and the address guard; the core does not import Tornado). A
document that cannot be fetched or is not valid is never stored: the request ends on contract 5's
error page, which names what was wrong, and the next request fetches again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import unquote

from lbauth.clock import Clock
from lbauth.core import urls
from lbauth.core.clients import metadata
from lbauth.core.crypto.masterkey import MasterKeys
from lbauth.errors import ClientDocumentInvalid
from lbauth.storage import Connection, Duplicate
from lbauth.storage.db import Database
from lbauth.storage.records import DEFAULT_GRANT_TYPES, PUBLIC_CLIENT_METHOD, App, ClientMetadata, Registration
from lbauth.storage.repo import apps as apps_repo

DOCUMENT_TIMEOUT = 5  # seconds for the whole fetch
DOCUMENT_MAX_BYTES = 5 * 1024
MAX_CACHE_SECONDS = 24 * 3600
MAX_URL_LENGTH = 2048  # apps.client_id


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
    parts = urls.split(client_id)
    if parts is None:
        return False
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


def intake(url: str, *, development: bool, grant_types: tuple[str, ...] = DEFAULT_GRANT_TYPES) -> metadata.Intake:
    """A document's client: public only, named by the URL's host when it gives no `client_name`."""
    parts = urls.split(url)
    host = (parts.hostname if parts is not None else None) or url
    return metadata.Intake(Registration.DOCUMENT, auth_methods=(PUBLIC_CLIENT_METHOD,),
                           default_auth_method=PUBLIC_CLIENT_METHOD, grant_types=grant_types,
                           development=development, default_name=host[:metadata.MAX_NAME])


def validate(url: str, document: dict[str, Any], client_intake: metadata.Intake) -> ClientMetadata:
    """The draft's section 4.1 checks (`client_id` equal to the URL by simple string comparison; no
    `client_secret`: such a client is public), then the client model's, redirect URIs as a
    registration's (contract 5). Raises ClientDocumentInvalid naming the problem."""
    if document.get("client_id") != url:
        raise ClientDocumentInvalid.because("its client_id is not the URL it was fetched from")
    if "client_secret" in document or "client_secret_expires_at" in document:
        raise ClientDocumentInvalid.because("it contains a client_secret; such a client must be public")
    try:
        return metadata.validate(document, client_intake)
    except metadata.EntryRefused as refused:
        shown = repr(refused.entry)[:120] if isinstance(refused.entry, str) else "a non-string value"
        raise ClientDocumentInvalid.because(f"its {refused.field} hold {shown}: {refused.reason}") from None
    except metadata.MetadataRefused as refused:
        raise ClientDocumentInvalid.because(f"its {refused.message()}") from None


class ClientDocuments:
    """Metadata-document clients as app rows (`registration='document'`, public, no owner, every
    scope; the document's `scope` kept in `client_metadata` as the default, never a ceiling)."""

    def __init__(self, db: Database, clock: Clock, fetcher: Fetcher, master_keys: Callable[[], MasterKeys], *,
                 development: bool, grant_types: Sequence[str] = DEFAULT_GRANT_TYPES) -> None:
        self.db, self.clock, self.fetcher = db, clock, fetcher
        self.master_keys = master_keys
        self.development = development
        self.grant_types = tuple(grant_types)  # the token endpoint's

    def names_document(self, client_id: Any) -> bool:
        return is_document_url(client_id, development=self.development)

    async def app(self, url: str) -> App:
        """The client the document at `url` registers: the stored copy while fresh, else fetched,
        validated and stored anew. Raises ClientDocumentInvalid (contract 5's error page)."""
        now = int(self.clock.now())
        stored = await self.db.read(apps_repo.by_client_id, url)
        if stored is not None and (stored.registration != Registration.DOCUMENT
                                   or (stored.document_expires_at or 0) > now):
            return stored
        try:
            fetched = await self.fetcher.fetch(url, self.clock.now())
        except DocumentUnavailable as failure:
            raise ClientDocumentInvalid.because(failure.reason) from None
        client = validate(url, fetched.document, intake(url, development=self.development,
                                                        grant_types=self.grant_types))
        expires_at = now + max(0, min(fetched.max_age, MAX_CACHE_SECONDS))
        for attempt in range(2):
            try:
                return await self.db.transaction(self._store, url, client, expires_at, now)
            except Duplicate:  # a concurrent request stored it first: update that row
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _store(self, conn: Connection, url: str, client: ClientMetadata, expires_at: int, now: int) -> App:
        if not apps_repo.update_document_app(conn, url, client, expires_at=expires_at, now=now):
            metadata.insert(conn, self.master_keys(), client, client_id=url, now=now, document_expires_at=expires_at)
        app = apps_repo.by_client_id(conn, url)
        assert app is not None
        return app
