"""What every handler shares: the envelope (contract section 3), one place that renders every
error, request bodies read under a size limit, request ids, and security headers.

Handlers stay thin: parse the request, call the core, render the result.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import sys
from asyncio import Future
from typing import Any
from urllib.parse import parse_qsl

import tornado.web

from lbauth import logs
from lbauth.core.audit import Source
from lbauth.errors import (
    BearerTokenError,
    FormExpired,
    InternalError,
    LbauthError,
    MalformedRequest,
    MethodNotAllowed,
    NotFound,
    RequestTooLarge,
    TokenInvalid,
    TokenMissing,
    ValidationFailed,
)
from lbauth.services import Services

log = logging.getLogger("lbauth.http")

_REQUEST_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
_FORM = "application/x-www-form-urlencoded"
_MAX_FIELDS = 100


# Set on the HTTP connection by lbauth.server's BodyDeadline: False from a request's headers until
# its body has been read.
REQUEST_READ = "lbauth_request_read"


@tornado.web.stream_request_body
class BaseHandler(tornado.web.RequestHandler):
    """Bodies are streamed so that an oversized one is refused (413) before it is read."""

    services: Services

    def initialize(self, services: Services) -> None:
        self.services = services
        self._body = bytearray()
        self._too_large = False

    # ---- request life cycle ---------------------------------------------------------------------

    def set_default_headers(self) -> None:
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Cache-Control", "no-store")

    def prepare(self) -> None:
        rid = self.request.headers.get("X-Request-Id", "")
        self.request_id = rid if _REQUEST_ID.fullmatch(rid) else secrets.token_hex(8)
        logs.request_id.set(self.request_id)
        self.set_header("X-Request-Id", self.request_id)
        declared = self.request.headers.get("Content-Length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body_bytes):
            raise RequestTooLarge() if declared.isdigit() else ValidationFailed("Invalid Content-Length header")
        if declared is None and self.request.connection is not None:
            # No declared length (a chunked body): Tornado's own limit would cut it off with a bare
            # "400 Bad Request", no envelope. Lift that limit for this request; data_received
            # enforces ours and answers 413 as soon as the body outgrows it.
            self.request.connection.set_max_body_size(sys.maxsize)
        if "%00" in self.request.uri:
            # Path and query arguments are percent-decoded: a NUL would reach the database, whose
            # text cannot hold it on PostgreSQL (500). Refused here, for every handler.
            raise ValidationFailed("The request URI contains a NUL character (%00).")

    @property
    def max_body_bytes(self) -> int:
        return self.services.settings.max_body_bytes

    def data_received(self, chunk: bytes) -> None:
        if self._too_large:
            return
        if len(self._body) + len(chunk) > self.max_body_bytes:
            # A chunked body with no declared length (prepare refused the others): answer 413 now,
            # and Tornado closes the connection instead of reading the rest.
            self._too_large = True
            self._body = bytearray()
            if not self._finished:
                self.send_error(413)
            return
        self._body += chunk

    @property
    def body(self) -> bytes:
        if self._too_large:
            raise RequestTooLarge()
        return bytes(self._body)

    def check_xsrf_cookie(self) -> None:
        """API endpoints authenticate by bearer token or client credentials, never by cookie."""

    _not_a_form = ""  # form_body: the content type of a body that was not a form

    def on_finish(self) -> None:
        logs.request_id.set(None)

    def finish(self, chunk: str | bytes | dict | None = None) -> Future[None]:
        """An answer given before the request was read in full (an error found in its headers)
        ends the connection: Tornado closes it rather than read the rest. Say so (RFC 9112 9.6),
        so that a keep-alive client sends its next request on a new connection."""
        if getattr(self.request.connection, REQUEST_READ, True) is False:
            self.set_header("Connection", "close")
        return super().finish(chunk)

    # ---- responses --------------------------------------------------------------------------------

    def send_data(self, data: Any, status: int = 200) -> None:
        """Success: HTTP 200 (202: accepted, to be done later) and `{"code": 0, "data": ...}` (spec
        section 4)."""
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps({"code": 0, "data": data}, separators=(",", ":")))

    def send_json(self, document: Any, status: int = 200) -> None:
        """A bare JSON document, for the RFC endpoints that define their own shapes."""
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps(document, separators=(",", ":")))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Every error, whatever raised it, leaves as the envelope; never with a traceback."""
        error = self._as_lbauth_error(status_code, kwargs.get("exc_info"))
        self.services.metrics.refused(error)
        self.clear()  # drop headers a half-done handler set, then put back the defaults
        self.set_header("X-Request-Id", getattr(self, "request_id", "") or secrets.token_hex(8))
        self.set_status(error.status)
        for name, value in error.headers.items():
            self.set_header(name, value)
        if isinstance(error, BearerTokenError) and "WWW-Authenticate" not in error.headers:
            self.set_header("WWW-Authenticate", error.challenge)  # RFC 6750 3
        if isinstance(error, MethodNotAllowed):
            self.set_header("Allow", ", ".join(self.allowed_methods()))
        self.render_error(error)

    def render_error(self, error: LbauthError) -> None:
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps(error.envelope(), separators=(",", ":")))

    def _as_lbauth_error(self, status_code: int, exc_info: Any) -> LbauthError:
        exc = exc_info[1] if exc_info else None
        if isinstance(exc, ValidationFailed) and exc.message.startswith("Field required") and self._not_a_form:
            # A JSON body at a form endpoint reads as no fields at all: say what to send instead.
            return ValidationFailed(f"{exc.message} (this endpoint reads application/x-www-form-urlencoded "
                                    f"fields, and the body was {self._not_a_form})", field=exc.field)
        if isinstance(exc, LbauthError):
            return exc
        if status_code == 404:
            return NotFound()
        if status_code == 405:
            return MethodNotAllowed()
        if status_code == 413:
            return RequestTooLarge()
        if status_code == 403 and isinstance(exc, tornado.web.HTTPError) and "_xsrf" in (exc.log_message or ""):
            return FormExpired()
        if 400 <= status_code < 500:
            return MalformedRequest(status_code)
        return InternalError()

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        if isinstance(value, LbauthError):
            if value.status >= 500:
                cause = value.__cause__
                log.warning("%s %s answered %s%s", self.request.method, self.request.path, value.sub_code,
                            f" ({type(cause).__name__}: {cause})" if cause else "")
            return
        if isinstance(value, tornado.web.HTTPError) and value.status_code < 500:
            return
        log.error("unhandled error in %s %s", self.request.method, self.request.path, exc_info=(typ, value, tb))

    def allowed_methods(self) -> list[str]:
        base = tornado.web.RequestHandler
        return [m for m in self.SUPPORTED_METHODS if getattr(type(self), m.lower()) is not getattr(base, m.lower())]

    # ---- request parsing --------------------------------------------------------------------------

    def json_body(self) -> dict[str, Any]:
        """The body as a JSON object, or ValidationFailed saying what is wrong."""
        try:
            value = json.loads(self.body.decode("utf-8"))
        except UnicodeDecodeError:
            raise ValidationFailed("The body is not valid UTF-8.") from None
        except (ValueError, RecursionError):
            raise ValidationFailed("The body is not valid JSON.") from None
        if not isinstance(value, dict):
            raise ValidationFailed("The body must be a JSON object.")
        if not _storable_text(value):
            raise ValidationFailed("The body holds a character that cannot be stored: NUL (\\u0000) "
                                   "or a lone surrogate (\\ud800-\\udfff).")
        return value

    def form_body(self, lists: tuple[str, ...] = ()) -> dict[str, Any]:
        """An `application/x-www-form-urlencoded` body as single values. Any other content type
        counts as no fields at all, so a JSON body gets `Field required` (spec 4.3). A parameter
        sent twice is refused (RFC 6749 3.2), except those named in `lists` (a page's checkboxes),
        which come as lists."""
        content_type = self.request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if content_type != _FORM:
            if self.body:
                self._not_a_form = content_type or "without a Content-Type"
            return {}
        try:
            pairs = parse_qsl(self.body.decode("utf-8"), keep_blank_values=True, strict_parsing=False,
                              max_num_fields=_MAX_FIELDS, errors="strict")
        except UnicodeDecodeError:
            raise ValidationFailed("The body is not valid UTF-8.") from None
        except ValueError:
            raise ValidationFailed("The body has too many fields.") from None
        return single_values(pairs, lists)

    def query_lists(self) -> dict[str, list[str]]:
        """The query string's parameters, each with all its values, decoded strictly: a value that is
        not UTF-8 is refused (contract 3), never passed on with replacement characters (a `nonce`
        would then come back altered in the ID token)."""
        try:
            return {name: [value.decode("utf-8") for value in values]
                    for name, values in self.request.query_arguments.items()}
        except UnicodeDecodeError:
            raise ValidationFailed("The query string is not valid UTF-8.") from None

    def bearer_token(self) -> str:
        """The token of `Authorization: Bearer <token>` (RFC 6750 2.1; the header form only)."""
        return self.authorization(("bearer",))[1]

    def authorization(self, schemes: tuple[str, ...] = ("bearer", "dpop")) -> tuple[str, str]:
        """The scheme (lower case) and token of the Authorization header, for one of `schemes`:
        `Bearer` (RFC 6750 2.1) or, for an access token, `DPoP` (RFC 9449 7.1)."""
        header = self.request.headers.get("Authorization")
        if not header:
            raise TokenMissing()
        scheme, _, token = header.strip().partition(" ")
        scheme, token = scheme.lower(), token.strip()
        if scheme not in schemes or not token or " " in token:
            raise TokenInvalid()
        return scheme, token

    async def checked_access_token(self, token: str, scheme: str) -> dict[str, Any]:
        """The claims of a live access token (no database read), presented as its binding demands:
        a DPoP-bound one with `Authorization: DPoP` and a proof of its key over this very request
        (RFC 9449 7), an unbound one as Bearer."""
        s = self.services
        claims = s.tokens.check(token)
        if scheme == "dpop" or "cnf" in claims:
            url = s.settings.base_url + self.request.path
            await s.oauth.dpop.for_access_token(claims, token, scheme, self.request.headers.get_list("DPoP"),
                                                self.request.method or "GET", url)
        return claims

    def refuse_credentials_in_query(self) -> None:
        """Client credentials in a URL end up in logs and histories (contract 6; RFC 6749 2.3.1)."""
        for name in ("client_secret", "code", "refresh_token", "code_verifier", "password"):
            if name in self.request.query_arguments:
                raise ValidationFailed(f"{name} must be sent in the request body, not in the query string")

    def limit_token_request(self, client_id: str) -> None:
        """Rate limits of the token endpoints: per source address, and per client from that address
        (429). Not per client alone: the client id is counted before the client is authenticated
        (a public client never is), so anyone naming it would hold back its real users."""
        address = self.request.remote_ip or ""
        self.services.rate_limits.hit("token-address", address)
        self.services.rate_limits.hit("token-client", client_id, address=address)

    def user_agent(self) -> str:
        """For the session list (contract 16: the first 200 characters)."""
        return self.request.headers.get("User-Agent", "")[:200]

    def source(self) -> Source:
        """Where this request came from (the TCP peer, its User-Agent): what a new session and the
        audit log keep of it."""
        return Source(self.request.remote_ip or "", self.user_agent())

    def limit_login(self, email: str) -> None:
        """Rate limits of password logins: per account and per source address (429)."""
        self.services.rate_limits.hit("login-address", self.request.remote_ip or "")
        self.services.rate_limits.hit("login-account", email.strip())

    def set_token_response_headers(self) -> None:
        """RFC 6749 5.1: token responses are never cached."""
        self.set_header("Cache-Control", "no-store")
        self.set_header("Pragma", "no-cache")


def single_values(pairs: list[tuple[str, str]], lists: tuple[str, ...] = ()) -> dict[str, Any]:
    form: dict[str, Any] = {name: [] for name in lists}
    for name, value in pairs:
        if "\x00" in value or "\x00" in name:
            raise ValidationFailed(f"Parameter contains a NUL character: {name[:40]}")
        if name in lists:
            form[name].append(value)
        elif name in form:
            raise ValidationFailed(f"Parameter sent more than once: {name[:40]}")
        else:
            form[name] = value
    return form


def _storable_text(document: Any) -> bool:
    """No NUL and no lone surrogate in any string of a parsed JSON document, keys included: the
    JSON escapes \\u0000 and \\ud800 parse, but PostgreSQL text cannot hold them (a 500), and
    SQLite should answer alike. Iterative: the document may be nested up to the parser's limit."""
    pending = [document]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if "\x00" in item or (not item.isascii() and not _encodes(item)):
                return False
        elif isinstance(item, dict):
            pending.extend(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return True


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class CorsHandler(BaseHandler):
    """An endpoint that browser clients call from any origin (contract 11): single-page apps and
    the MCP Inspector. Every answer, errors included, carries `Access-Control-Allow-Origin: *`
    and never allows credentials (no cookie is read here); OPTIONS answers the preflight, naming
    the request headers one by one since a `*` never covers Authorization (Fetch standard).
    Pages and the /api/ endpoints that take a user token or a cookie never answer CORS."""

    CORS_REQUEST_HEADERS = "Authorization, Content-Type, DPoP, MCP-Protocol-Version"
    CORS_EXPOSED_HEADERS = "WWW-Authenticate, Retry-After, ETag, X-Request-Id"
    CORS_MAX_AGE = "600"

    def set_default_headers(self) -> None:
        super().set_default_headers()
        self.set_header("Access-Control-Allow-Origin", "*")
        self.set_header("Access-Control-Expose-Headers", self.CORS_EXPOSED_HEADERS)

    def options(self, *_args: str) -> None:
        """The CORS preflight: 204, the methods this endpoint answers and the headers it takes."""
        self.set_status(204)
        self.set_header("Access-Control-Allow-Methods", ", ".join(self.allowed_methods()))
        self.set_header("Access-Control-Allow-Headers", self.CORS_REQUEST_HEADERS)
        self.set_header("Access-Control-Max-Age", self.CORS_MAX_AGE)
        self.finish()


class NotFoundHandler(BaseHandler):
    """Unknown routes: the envelope with 404, whatever the method."""

    def prepare(self) -> None:
        super().prepare()
        raise NotFound()
