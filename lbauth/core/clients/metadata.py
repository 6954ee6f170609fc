"""One client model (RFC 7591 2; contract 2, 12 and 17): every client is validated here, however it
arrives (an operator's app from `lbauth apps` or the console, an RFC 7591 registration, a client ID
metadata document), into one `ClientMetadata` record, and `insert` makes its app row.

What differs between the ways of registering is data, an `Intake`: the fields it reads, the client
authentication methods and grant types it accepts (the server's registries), whether development's
http redirect URIs are allowed. A refusal names the field and the reason (`MetadataRefused`); each
way words it as its own error: the operator's `request.validation_failed`, RFC 7591 3.2.2's
`invalid_redirect_uri` and `invalid_client_metadata`, the metadata document's error page.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lbauth.core import scopes, urls
from lbauth.core.crypto import opaque
from lbauth.core.crypto.keys import ID_TOKEN_DEFAULT_ALG
from lbauth.core.crypto.masterkey import MasterKeys
from lbauth.core.oauth.client_auth import PUBLIC_SECRET_DIGEST
from lbauth.core.oidc.id_tokens import ID_TOKEN_ALGS
from lbauth.errors import ValidationFailed
from lbauth.storage import Connection
from lbauth.storage.records import DEFAULT_GRANT_TYPES, ClientMetadata, Registration
from lbauth.storage.repo import apps as apps_repo

AUTHORIZATION_CODE = "authorization_code"  # the grant every client registers for
APPLICATION_TYPES = ("web", "native")
MAX_NAME = 200  # apps.name
MAX_SCOPE_LENGTH = 1000


class MetadataRefused(Exception):
    """A client field refused: `field` as RFC 7591 (or the operator's command) names it, and a
    `reason` that completes the sentence "<field> ..."."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field} {reason}")
        self.field, self.reason = field, reason

    def message(self, name: str | None = None) -> str:
        """The refusal as a sentence, the field called `name` (by default its own name)."""
        return f"{name or self.field} {self.reason}"


class EntryRefused(MetadataRefused):
    """One value of a field refused (a redirect URI, the webhook URL): `entry` is that value and
    `reason` a sentence of its own, naming what is wrong with it."""

    def __init__(self, field: str, entry: Any, reason: str) -> None:
        super().__init__(field, reason)
        self.entry = entry

    def message(self, name: str | None = None) -> str:
        return self.reason


# What a client says of itself (RFC 7591 2), in the order they are checked.
CLIENT_FIELDS = ("token_endpoint_auth_method", "grant_types", "response_types", "application_type",
                 "redirect_uris", "client_name", "scope", "client_uri", "logo_uri",
                 "require_pushed_authorization_requests", "dpop_bound_access_tokens")
# What only an operator sets (contract 2 and 12): the scopes an app may ask for, its revocation
# webhook, its ID tokens' algorithm and its logout redirect URIs (contract 15).
OPERATOR_FIELDS = ("scopes", "webhook_url", "id_token_alg", "post_logout_redirect_uris")


@dataclass(frozen=True)
class Intake:
    """What one way of registering accepts, as data (node-oidc-provider's per-feature client schema)."""
    registration: Registration
    auth_methods: tuple[str, ...]  # the token_endpoint_auth_method values accepted
    default_auth_method: str
    grant_types: tuple[str, ...] = DEFAULT_GRANT_TYPES  # the token endpoint's grant types
    development: bool = False  # http redirect URIs to any host (contract 5)
    default_name: str | None = None  # for a client that sends no name; None: a name is required
    max_redirect_uris: int | None = None
    fields: tuple[str, ...] = CLIENT_FIELDS  # those read; the others take their defaults


def validate(document: Mapping[str, Any], intake: Intake) -> ClientMetadata:
    """The client `document` describes (RFC 7591 2: a null field is an absent one), or MetadataRefused."""
    given = {name: value for name, value in document.items() if value is not None}
    if "sector_identifier_uri" in given:
        raise MetadataRefused("sector_identifier_uri", "is not supported")
    if given.get("subject_type", "pairwise") != "pairwise":
        raise MetadataRefused("subject_type", "must be pairwise: every app sees its own user ids")
    read = {name: value for name, value in given.items() if name in intake.fields}
    return ClientMetadata(registration=intake.registration, **check(read, intake, _CHECKS))


def check(given: Mapping[str, Any], intake: Intake, names: Iterable[str]) -> dict[str, Any]:
    """The `names` fields of `given` checked (an absent one takes its default), by their record
    names: `validate` checks them all, a change of settings those it changes."""
    checked = {}
    for name in names:
        attribute, checker = _CHECKS[name]
        checked[attribute] = checker(name, given.get(name), intake)
    return checked


def _auth_method(name: str, value: Any, intake: Intake) -> str:
    method = intake.default_auth_method if value is None else value
    if method not in intake.auth_methods:
        raise MetadataRefused(name, f"must be {_either(intake.auth_methods)}")
    return method


def _grant_types(name: str, value: Any, intake: Intake) -> list[str]:
    """Among the token endpoint's grant types, authorization_code always."""
    grant_types = _strings(name, value, list(DEFAULT_GRANT_TYPES))
    if any(g not in intake.grant_types for g in grant_types) or AUTHORIZATION_CODE not in grant_types:
        others = [g for g in intake.grant_types if g != AUTHORIZATION_CODE]
        raise MetadataRefused(name, f"must hold {AUTHORIZATION_CODE}" + (f", and may hold {_either(others)}"
                                                                         if others else ""))
    return list(dict.fromkeys(grant_types))


def _response_types(name: str, value: Any, intake: Intake) -> list[str]:
    if set(_strings(name, value, ["code"])) != {"code"}:
        raise MetadataRefused(name, 'must be ["code"]')
    return ["code"]


def _application_type(name: str, value: Any, intake: Intake) -> str:
    """Accepted and echoed; it does not narrow redirect URIs (contract 17)."""
    application_type = APPLICATION_TYPES[0] if value is None else value
    if application_type not in APPLICATION_TYPES:
        raise MetadataRefused(name, f"must be {_either(APPLICATION_TYPES)}")
    return application_type


def _redirect_uris(name: str, value: Any, intake: Intake) -> list[str]:
    """At least one; https, loopback http, or a private-use scheme (RFC 8252 7.1), never a fragment
    (contract 5 and 17); http to any host only where the intake allows development's."""
    if not isinstance(value, list) or not value:
        raise MetadataRefused(name, "must be a non-empty array of URIs")
    if intake.max_redirect_uris is not None and len(value) > intake.max_redirect_uris:
        raise MetadataRefused(name, f"must hold at most {intake.max_redirect_uris} URIs")
    return _uris(name, value, intake)


def _post_logout_uris(name: str, value: Any, intake: Intake) -> list[str]:
    """OpenID Connect RP-Initiated Logout 1.0 3.1: registered exactly, checked like redirect URIs."""
    return _uris(name, list(value or ()), intake)


def _uris(name: str, values: list[Any], intake: Intake) -> list[str]:
    checked = []
    for uri in values:
        try:
            checked.append(urls.check_redirect_uri(uri, development=intake.development))
        except ValidationFailed as error:
            raise EntryRefused(name, uri, error.message) from None
    return list(dict.fromkeys(checked))


def _name(name: str, value: Any, intake: Intake) -> str:
    if value is None and intake.default_name is not None:
        return intake.default_name
    stripped = value.strip() if isinstance(value, str) else ""
    if not stripped or len(stripped) > MAX_NAME or not stripped.isprintable():
        raise MetadataRefused(name, f"must be 1 to {MAX_NAME} printable characters")
    return stripped


def _scope(name: str, value: Any, intake: Intake) -> str | None:
    """The default for a request without `scope`, never a ceiling (contract 17): the known scopes,
    in the order sent; unknown values are ignored."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_SCOPE_LENGTH:
        raise MetadataRefused(name, f"must be a string of space-separated scopes, at most {MAX_SCOPE_LENGTH} "
                                    "characters")
    return " ".join(s for s in dict.fromkeys(value.split()) if s in scopes.SCOPES) or None


def _web_url(name: str, value: Any, intake: Intake) -> str | None:
    """A web page of the client's (`client_uri`, `logo_uri`): http(s), never `javascript:` and the like."""
    if value is None:
        return None
    try:
        if not isinstance(value, str) or "#" in value or len(value) > urls.MAX_URL_LENGTH \
                or not value.isprintable() or " " in value:
            raise ValueError(name)
        parts = urls.split(value)
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
            raise ValueError(name)
    except ValueError:
        raise MetadataRefused(name, "must be an absolute http(s) URL without a fragment") from None
    return value


def _allowed_scopes(name: str, value: Any, intake: Intake) -> list[str]:
    """The operator's ceiling (contract 2); none named: every scope. An unknown one is ScopeInvalid."""
    return list(scopes.validate(value) if value else scopes.ALL)


def _webhook_url(name: str, value: Any, intake: Intake) -> str | None:
    """Contract 10; "" is no webhook."""
    if not value:
        return None
    try:
        return urls.check_webhook_url(value, development=intake.development)
    except ValidationFailed as error:
        raise EntryRefused(name, value, error.message) from None


def _id_token_alg(name: str, value: Any, intake: Intake) -> str:
    if value is None:
        return ID_TOKEN_DEFAULT_ALG
    if value not in ID_TOKEN_ALGS:
        raise MetadataRefused(name, f"must be one of {', '.join(ID_TOKEN_ALGS)}")
    return value


def _flag(name: str, value: Any, intake: Intake) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise MetadataRefused(name, "must be true or false")
    return value


def _strings(name: str, value: Any, default: list[str]) -> list[str]:
    if value is None:
        return default
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise MetadataRefused(name, "must be a non-empty array of strings")
    return value


def _either(values: tuple[str, ...] | list[str]) -> str:
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} or {values[-1]}"


# Each field: the record attribute it fills and its check, in the order of the checks.
_CHECKS: dict[str, tuple[str, Callable[[str, Any, Intake], Any]]] = {
    "token_endpoint_auth_method": ("token_endpoint_auth_method", _auth_method),
    "grant_types": ("grant_types", _grant_types),
    "response_types": ("response_types", _response_types),
    "application_type": ("application_type", _application_type),
    "redirect_uris": ("redirect_uris", _redirect_uris),
    "client_name": ("name", _name),
    "scope": ("scope", _scope),
    "client_uri": ("client_uri", _web_url),
    "logo_uri": ("logo_uri", _web_url),
    "scopes": ("scopes", _allowed_scopes),
    "webhook_url": ("webhook_url", _webhook_url),
    "id_token_alg": ("id_token_alg", _id_token_alg),
    "post_logout_redirect_uris": ("post_logout_redirect_uris", _post_logout_uris),
    "require_pushed_authorization_requests": ("require_pushed_authorization_requests", _flag),  # RFC 9126 6
    "dpop_bound_access_tokens": ("dpop_bound_access_tokens", _flag),  # RFC 9449 5.2
}


# ---- the app row ---------------------------------------------------------------------------------------

def webhook_secret_purpose(app_id: str) -> str:
    return f"webhook_secret:{app_id}"


@dataclass(frozen=True)
class NewApp:
    """An app just inserted and its secrets, shown this once: none for a public client's."""
    app_id: str
    client_secret: str | None = field(repr=False)
    webhook_secret: str = field(repr=False)


def insert(conn: Connection, keys: MasterKeys, metadata: ClientMetadata, *, client_id: str, now: int,
           owner_id: str | None = None, registration_token: str | None = None,
           document_expires_at: int | None = None) -> NewApp:
    """The app row of a validated client, however it registered. Secrets are kept as digests: a
    public client (contract 17) stores PUBLIC_SECRET_DIGEST, which no secret matches. Every app
    holds a sealed webhook secret, even without a webhook: master key rotation reseals them all."""
    app_id = opaque.new_id("app_")
    client_secret = None if metadata.public else opaque.new_secret(opaque.CLIENT_SECRET)
    webhook_secret = opaque.new_secret(opaque.WEBHOOK_SECRET)
    apps_repo.insert_app(
        conn, metadata, app_id=app_id, client_id=client_id, owner_id=owner_id,
        client_secret_hash=PUBLIC_SECRET_DIGEST if client_secret is None else opaque.digest(client_secret),
        webhook_secret_sealed=keys.seal(webhook_secret.encode(), webhook_secret_purpose(app_id)), now=now,
        registration_token_hash=None if registration_token is None else opaque.digest(registration_token),
        document_expires_at=document_expires_at)
    return NewApp(app_id=app_id, client_secret=client_secret, webhook_secret=webhook_secret)

