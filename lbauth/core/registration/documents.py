"""Client ID metadata documents (draft-ietf-oauth-client-id-metadata-document-01, contract 17): a
`client_id` that is an https URL names a JSON document, published by the client, that registers it.

The authorization endpoint loads such a client through `ClientDocuments.app`: the stored copy while
its HTTP caching says it is fresh (at most 24 h), else a new fetch through the injected `Fetcher`
(lbauth/outbound.py does the HTTP, the address guard and the per-host cap on fetches at once; the
core does not import Tornado). A document that cannot be fetched or is not valid is never stored:
the request ends on the error page, which names what was wrong, and the next request fetches again,
except after a fetch that timed out: a host that stalls is not asked again for that URL for a
minute, so that requests naming it cannot keep fetch slots busy.

Fetching is what an anonymous caller can make lbauth do, so it is bounded: fetches per caller
address and per host are rate limited, concurrent requests for one URL share one fetch, nothing is
stored for a request whose redirect URI the document does not list, a host may have at most
MAX_UNAPPROVED_PER_HOST stored clients that no user approved, and such clients are removed once
their copy expires (`remove_unapproved`).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import unquote

from lbauth.clock import Clock
from lbauth.core import audit, urls
from lbauth.core.clients import metadata
from lbauth.core.crypto.masterkey import MasterKeys
from lbauth.core.ratelimit import RateLimiter
from lbauth.errors import ClientDocumentInvalid, RedirectUriMismatch
from lbauth.storage import Connection, Duplicate
from lbauth.storage.db import Database
from lbauth.storage.records import DEFAULT_GRANT_TYPES, PUBLIC_CLIENT_METHOD, App, ClientMetadata, Registration
from lbauth.storage.repo import apps as apps_repo

DOCUMENT_TIMEOUT = 5  # seconds for the whole fetch
DOCUMENT_MAX_BYTES = 5 * 1024
MAX_CACHE_SECONDS = 24 * 3600
MAX_URL_LENGTH = 2048  # apps.client_id
STALLED_MEMORY_SECONDS = 60  # a URL whose fetch timed out is not fetched again for this long
MAX_REMEMBERED = 10_000  # stalled URLs remembered at most (the oldest forgotten first)
MAX_UNAPPROVED_PER_HOST = 100  # stored document clients of one host that no user has approved


class DocumentUnavailable(Exception):
    """The fetcher got no usable answer; `reason` completes "The client's metadata document ...";
    `stalled`: it timed out (its host held a fetch slot for the whole timeout)."""

    def __init__(self, reason: str, *, stalled: bool = False) -> None:
        super().__init__(reason)
        self.reason, self.stalled = reason, stalled


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


def host_of(url: str) -> str:
    """The host a document URL names, lowercased: what the per-host limits count."""
    parts = urls.split(url)
    return ((parts.hostname if parts is not None else None) or "").lower()


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
                 development: bool, grant_types: Sequence[str] = DEFAULT_GRANT_TYPES,
                 rate_limits: RateLimiter | None = None) -> None:
        self.db, self.clock, self.fetcher = db, clock, fetcher
        self.master_keys = master_keys
        self.development = development
        self.grant_types = tuple(grant_types)  # the token endpoint's
        self.rate_limits = rate_limits
        self._fetching: dict[str, asyncio.Future[FetchedDocument]] = {}  # url -> the fetch under way
        self._stalled: OrderedDict[str, tuple[float, str]] = OrderedDict()  # url -> (until, reason)

    def names_document(self, client_id: Any) -> bool:
        return is_document_url(client_id, development=self.development)

    async def app(self, url: str, redirect_uri: str | None = None, address: str | None = None) -> App:
        """The client the document at `url` registers: the stored copy while fresh, else fetched
        (for a caller at `address`), validated and stored anew, unless it does not list
        `redirect_uri` (RedirectUriMismatch, nothing stored). Raises ClientDocumentInvalid (the
        error page) and RateLimited."""
        now = int(self.clock.now())
        stored = await self.db.read(apps_repo.by_client_id, url)
        if stored is not None and (stored.registration != Registration.DOCUMENT
                                   or (stored.document_expires_at or 0) > now):
            return stored
        fetched = await self._fetch(url, address)
        client = validate(url, fetched.document, intake(url, development=self.development,
                                                        grant_types=self.grant_types))
        if redirect_uri is not None and not urls.is_registered(redirect_uri, list(client.redirect_uris)):
            raise RedirectUriMismatch()
        expires_at = now + max(0, min(fetched.max_age, MAX_CACHE_SECONDS))
        for attempt in range(2):
            try:
                return await self.db.transaction(self._store, url, client, expires_at, now, address or "")
            except Duplicate:  # a concurrent request stored it first: update that row
                if attempt:
                    raise
        raise AssertionError("unreachable")

    async def _fetch(self, url: str, address: str | None) -> FetchedDocument:
        """One fetch of `url` shared by every request that needs it meanwhile; counted against the
        caller's address and the URL's host; refused at once for a while after it timed out."""
        now = self.clock.now()
        remembered = self._stalled.get(url)
        if remembered is not None:
            if remembered[0] > now:
                raise ClientDocumentInvalid.because(f"{remembered[1]} (lbauth tries again "
                                                    f"{STALLED_MEMORY_SECONDS} seconds after that)")
            del self._stalled[url]
        fetch = self._fetching.get(url)
        if fetch is None:
            if self.rate_limits is not None:
                self.rate_limits.hit("document-address", address or "")
                self.rate_limits.hit("document-host", host_of(url))
            fetch = asyncio.ensure_future(self.fetcher.fetch(url, now))
            self._fetching[url] = fetch
            fetch.add_done_callback(lambda done: self._fetched(url, done))
        try:
            return await asyncio.shield(fetch)
        except DocumentUnavailable as failure:
            raise ClientDocumentInvalid.because(failure.reason) from None

    def _fetched(self, url: str, fetch: asyncio.Future[FetchedDocument]) -> None:
        if self._fetching.get(url) is fetch:
            del self._fetching[url]
        failure = None if fetch.cancelled() else fetch.exception()  # retrieved, even with no one waiting
        if isinstance(failure, DocumentUnavailable) and failure.stalled:
            self._stalled[url] = (self.clock.now() + STALLED_MEMORY_SECONDS, failure.reason)
            if len(self._stalled) > MAX_REMEMBERED:
                self._stalled.popitem(last=False)

    def _store(self, conn: Connection, url: str, client: ClientMetadata, expires_at: int, now: int,
               address: str) -> App:
        if not apps_repo.update_document_app(conn, url, client, expires_at=expires_at, now=now):
            host = host_of(url)
            if apps_repo.count_unapproved_documents(conn, host) >= MAX_UNAPPROVED_PER_HOST:
                raise ClientDocumentInvalid.because(
                    f"{host} already has {MAX_UNAPPROVED_PER_HOST} clients that no user has approved; "
                    "retry once their documents expire")
            metadata.insert(conn, self.master_keys(), client, client_id=url, now=now, document_expires_at=expires_at)
            audit.record(conn, now, audit.EventType.CLIENT_REGISTERED, audit.Actor.client(url),
                         source=audit.Source(ip_address=address), detail={"clientId": url, "app": client.name,
                                                                          "via": Registration.DOCUMENT})
        app = apps_repo.by_client_id(conn, url)
        assert app is not None
        return app

    async def remove_unapproved(self) -> int:
        """Delete the document clients whose copy expired and that no user ever approved (no grant,
        no pairwise subject): a stranger's requests leave nothing behind for long. Returns how many."""
        return await self.db.transaction(apps_repo.delete_unapproved_documents, int(self.clock.now()))
