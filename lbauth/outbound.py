"""Requests lbauth itself makes to addresses others chose: webhook deliveries (contract 10) and
client ID metadata documents (contract 17, draft-ietf-oauth-client-id-metadata-document-01).

- The address guard sits in the resolver: the HTTP client connects only to what it returns, so
  there is no gap between the check and the connection (no DNS rebinding in between).
- Metadata documents: GET with `Accept: application/json`, no redirect followed, 5 s, 5 KiB, only a
  200 JSON object; HTTPS trusts the system's store plus LBAUTH_OUTBOUND_CA_FILE; the answer's HTTP
  caching (max-age, else Expires) says how long it may be used, at most 24 h. Their own client, with
  MAX_FETCHES connections, of which one host gets MAX_FETCHES_PER_HOST at once: a host that stalls
  keeps its own callers waiting, never another host's.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import json
import re
import socket
import ssl
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from tornado.httpclient import AsyncHTTPClient, HTTPRequest, HTTPResponse
from tornado.httputil import HTTPHeaders
from tornado.netutil import DefaultLoopResolver, Resolver
from tornado.simple_httpclient import HTTPStreamClosedError

from lbauth import tracing
from lbauth.core import urls
from lbauth.core.registration.documents import (
    DOCUMENT_MAX_BYTES,
    DOCUMENT_TIMEOUT,
    MAX_CACHE_SECONDS,
    DocumentUnavailable,
    FetchedDocument,
    host_of,
)
from lbauth.settings import Settings

if TYPE_CHECKING:
    from lbauth import otel

_MAX_AGE = re.compile(r"(?:^|,)\s*max-age\s*=\s*\"?(\d+)\"?\s*(?:,|$)", re.IGNORECASE)
_NO_CACHING = re.compile(r"(?:^|,)\s*(?:no-store|no-cache)\b", re.IGNORECASE)

MAX_FETCHES = 64  # metadata-document fetches at once, every host together
MAX_FETCHES_PER_HOST = 2  # ... and for one host; the others wait, within the same timeout


class ForbiddenAddress(OSError):
    """The host resolves only to addresses a production server must not call."""


class PublicOnlyResolver(Resolver):
    """Resolves as usual, then drops every address that is not globally routable (the SSRF guard,
    `urls.is_forbidden_address`); `allow_loopback` keeps loopback ones (development)."""

    def initialize(self, allow_loopback: bool = False) -> None:  # type: ignore[override]
        self._resolver = DefaultLoopResolver()
        self._allow_loopback = allow_loopback

    async def resolve(self, host: str, port: int, family: socket.AddressFamily = socket.AF_UNSPEC):
        addresses = await self._resolver.resolve(host, port, family)
        allowed = [(fam, addr) for fam, addr in addresses
                   if not urls.is_forbidden_address(addr[0], allow_loopback=self._allow_loopback)]
        if not allowed:
            raise ForbiddenAddress(f"{host} resolves only to addresses that are not globally routable")
        return allowed


def outbound_tls(settings: Settings) -> ssl.SSLContext:
    """The system's trusted CAs plus the PEM file LBAUTH_OUTBOUND_CA_FILE names (a private CA)."""
    return _tls_context(str(settings.outbound_ca_file) if settings.outbound_ca_file else None)


@functools.cache
def _tls_context(ca_file: str | None) -> ssl.SSLContext:
    """One context per CA file for the process: reading the system's CAs takes tens of
    milliseconds, and a context is safe to share between clients."""
    context = ssl.create_default_context()
    if ca_file:
        context.load_verify_locations(cafile=ca_file)
    return context


def freshness_seconds(headers: HTTPHeaders, now: float) -> int:
    """How long the answer may be used (RFC 9111 4.2.1), at most 24 h: `no-store` or `no-cache`
    never; `max-age`; else `Expires` minus `Date` (or now); no caching header at all: never, so a
    document without one is fetched at every authorization request."""
    cache_control = ",".join(headers.get_list("Cache-Control"))
    if _NO_CACHING.search(cache_control):
        return 0
    match = _MAX_AGE.search(cache_control)
    if match:
        lifetime = _seconds(match.group(1))
    else:
        expires = _http_date(headers.get("Expires"))
        if expires is None:
            return 0
        lifetime = int(expires - (_http_date(headers.get("Date")) or now))
    age = headers.get("Age", "").strip()
    if age.isdigit():
        lifetime -= _seconds(age)
    return max(0, min(lifetime, MAX_CACHE_SECONDS))


def _seconds(digits: str) -> int:
    """A delta-seconds value; RFC 9111 1.2.2: one too large to represent counts as 2^31 (and a
    number of 5,000 digits is not parsed at all)."""
    return int(digits) if len(digits) <= 10 else 2**31


def _http_date(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return email.utils.parsedate_to_datetime(value.strip()).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


class DocumentFetcher:
    """Fetches client ID metadata documents for the core (`documents.Fetcher`)."""

    def __init__(self, settings: Settings, *, timeout: float = DOCUMENT_TIMEOUT) -> None:
        self._tls = outbound_tls(settings)
        self._timeout = timeout
        self._allow_loopback = settings.development
        self._http: AsyncHTTPClient | None = None  # made on first use, on the serving event loop
        self._hosts: dict[str, tuple[asyncio.Semaphore, int]] = {}  # host -> (its slots, requests using them)

    @property
    def http(self) -> AsyncHTTPClient:
        if self._http is None:
            resolver = PublicOnlyResolver(allow_loopback=self._allow_loopback)
            self._http = AsyncHTTPClient(force_instance=True, resolver=resolver, max_body_size=DOCUMENT_MAX_BYTES,
                                         max_clients=MAX_FETCHES)
        return self._http

    async def fetch(self, url: str, now: float) -> FetchedDocument:
        """GET `url` once one of its host's slots is free, all within the timeout."""
        host = host_of(url)
        slots, users = self._hosts.get(host, (asyncio.Semaphore(MAX_FETCHES_PER_HOST), 0))
        self._hosts[host] = (slots, users + 1)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        try:
            try:
                await asyncio.wait_for(slots.acquire(), self._timeout)
            except TimeoutError:
                raise DocumentUnavailable(f"it did not answer within {self._timeout:g} seconds (its host is busy "
                                          "with other fetches)", stalled=True) from None
            try:
                return await self._get(url, now, max(0.001, deadline - loop.time()))
            finally:
                slots.release()
        finally:
            slots, users = self._hosts[host]
            if users == 1:
                del self._hosts[host]
            else:
                self._hosts[host] = (slots, users - 1)

    async def _get(self, url: str, now: float, timeout: float) -> FetchedDocument:
        headers = _HeaderWatch()
        request = HTTPRequest(url, method="GET", follow_redirects=False, connect_timeout=timeout,
                              request_timeout=timeout, ssl_options=self._tls, decompress_response=False,
                              header_callback=headers, headers={"Accept": "application/json",
                                                                "User-Agent": "lbauth-client-documents/1"})
        try:
            response = await self.http.fetch(request, raise_error=False) if tracing.active is None else \
                await self._traced(request, tracing.active)
        except ForbiddenAddress:
            raise DocumentUnavailable("its host is not a public address") from None
        except HTTPStreamClosedError:  # the client stops reading at DOCUMENT_MAX_BYTES by closing
            raise DocumentUnavailable(headers.closed_reason()) from None
        except Exception as exc:  # noqa: BLE001 - refused, reset, TLS failure, timeout...
            raise DocumentUnavailable(_failure(exc, self._timeout), stalled=_timed_out(exc)) from None
        if 300 <= response.code < 400:
            raise DocumentUnavailable(f"it answered a redirect ({response.code}), which is not followed")
        if response.code != 200:
            raise DocumentUnavailable(f"it answered HTTP {response.code}, not 200")
        body = response.body or b""
        if len(body) > DOCUMENT_MAX_BYTES:
            raise DocumentUnavailable(f"it is larger than {DOCUMENT_MAX_BYTES} bytes")
        try:
            document = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise DocumentUnavailable("it is not JSON") from None
        if not isinstance(document, dict):
            raise DocumentUnavailable("it is not a JSON object")
        return FetchedDocument(document, freshness_seconds(response.headers, now))

    async def _traced(self, request: HTTPRequest, traced: otel.Tracing) -> HTTPResponse:
        """The fetch in a CLIENT span (tracing on): the document's URL (a client ID, public) without
        its query; no traceparent goes to its host."""
        parts = urlsplit(request.url)
        attributes = {**traced.outbound_attributes(request.url, "GET"),
                      "url.full": urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))}
        with traced.client_span("GET client metadata document", attributes) as span:
            try:
                response = await self.http.fetch(request, raise_error=False)
            except Exception as exc:
                traced.http_outcome(span, None, exc)
                raise
            traced.http_outcome(span, response.code if response.code != 599 else None, response.error)
            return response

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None


class _HeaderWatch:
    """The answer's header lines as they arrive (`header_callback`): why a stream closed early."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        self.lines.append(line)

    def closed_reason(self) -> str:
        if not self.lines:
            return "it closed the connection without an answer"
        headers = HTTPHeaders.parse("".join(self.lines[1:]))
        length = headers.get("Content-Length", "").strip()
        if length.isdigit() and int(length) > DOCUMENT_MAX_BYTES:
            return f"it is larger than {DOCUMENT_MAX_BYTES} bytes"
        return f"it is larger than {DOCUMENT_MAX_BYTES} bytes, or its answer broke off"


def _timed_out(error: BaseException) -> bool:
    return "Timeout" in type(error).__name__ or "Timeout" in str(error)


def _failure(error: BaseException, timeout: float) -> str:
    """A reason for the error page: what went wrong, without internals."""
    text = str(error)
    if _timed_out(error):
        return f"it did not answer within {timeout:g} seconds"
    if isinstance(error, ssl.SSLError) or "CERTIFICATE" in text.upper():
        return "its TLS certificate is not trusted"
    return f"it could not be fetched ({type(error).__name__})"
