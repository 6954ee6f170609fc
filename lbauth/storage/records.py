"""Typed records: what the repository functions (lbauth.storage.repo) take and return.

Frozen dataclasses, one per query shape, their fields named like the columns they hold and in the
order their query selects them, so that a repository function builds one from a row by position,
the cheapest conversion (`repo.shaped` checks the order once, at import).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum, StrEnum
from typing import Any, Final, Literal


@dataclass(frozen=True, slots=True)
class User:
    """A user (contract section 4); the users table whole."""
    id: str
    email: str
    name: str
    avatar: str
    bio: str
    interest_tags: list[str]
    password_hash: str
    created_at: int
    disabled_at: int | None
    deleted_at: int | None
    email_verified: bool
    mfa: bool = False  # has a second factor (contract 19)

    @property
    def active(self) -> bool:
        return self.disabled_at is None and self.deleted_at is None


@dataclass(frozen=True, slots=True)
class Session:
    """A server-side session (contract section 16), the sessions table whole."""
    id: str
    token_hash: str
    user_id: str
    kind: str
    created_at: int
    last_used_at: int
    expires_at: int
    ended_at: int | None
    user_agent: str
    ip_address: str
    authenticated_at: int  # the last sign-in (OpenID auth_time)
    amr: str = "pwd"  # what it proved: RFC 8176 values, space-separated


# RFC 7591 2 `token_endpoint_auth_method` of a public client (contract 17): no secret.
PUBLIC_CLIENT_METHOD: Final = "none"  # noqa: S105 (a method name, not a secret)
# RFC 7591 2 default `grant_types` here: every grant gets a refresh token (contract 17).
DEFAULT_GRANT_TYPES: Final = ("authorization_code", "refresh_token")
# RFC 8628 3.4: the device grant, which an app uses only if its `grant_types` hold it.
DEVICE_CODE_GRANT_TYPE: Final = "urn:ietf:params:oauth:grant-type:device_code"


class Registration(StrEnum):
    """How an app came to be registered (contract 2, 12 and 17), the apps.registration column."""
    OPERATOR = "operator"  # `lbauth apps create` or the console: an owner, the operator's trust
    DYNAMIC = "dynamic"    # RFC 7591 dynamic registration: no owner, a registration access token
    DOCUMENT = "document"  # a client ID metadata document: no owner, public, cached


@dataclass(frozen=True, slots=True)
class App:
    """A registered app and its owner's email (spec section 1, contract sections 2 and 17); an app
    that registered itself has no owner."""
    id: str
    client_id: str
    name: str
    owner_id: str | None
    client_secret_hash: str
    redirect_uris: list[str]
    scopes: list[str]
    webhook_url: str | None
    webhook_secret_sealed: str
    webhook_disabled_at: int | None
    created_at: int
    updated_at: int
    id_token_alg: str
    post_logout_redirect_uris: list[str]
    token_endpoint_auth_method: str
    registration: str  # a Registration value
    registration_token_hash: str | None
    client_metadata: dict[str, Any] | None
    document_expires_at: int | None
    owner_email: str | None

    @property
    def public(self) -> bool:
        """A public client (RFC 6749 2.1, contract 17): no secret; PKCE S256 required."""
        return self.token_endpoint_auth_method == PUBLIC_CLIENT_METHOD

    @property
    def default_scopes(self) -> list[str]:
        """What a request without `scope` asks for: the `scope` an app registered itself with (RFC
        7591 2, contract 17), within its allowed scopes; otherwise all of them. Never a ceiling."""
        registered = (self.client_metadata or {}).get("scope")
        wanted = set(registered.split()) if isinstance(registered, str) else set()
        return [s for s in self.scopes if s in wanted] or list(self.scopes)

    @property
    def requires_dpop(self) -> bool:
        """RFC 9449 5.2: its tokens are all DPoP-bound (`ClientMetadata`'s field)."""
        return (self.client_metadata or {}).get("dpop_bound_access_tokens") is True

    @property
    def requires_pushed_requests(self) -> bool:
        """RFC 9126 6: its authorization requests must be pushed first (`ClientMetadata`'s field)."""
        return (self.client_metadata or {}).get("require_pushed_authorization_requests") is True


@dataclass(frozen=True, slots=True)
class ClientMetadata:
    """A client's registered metadata, however it arrived (RFC 7591 2; contract 2, 12 and 17), as
    lbauth.core.clients.metadata validated it: an app row but its ids and secrets. The fields with
    no column of their own are kept in `client_metadata` under their RFC 7591 names (`extensions`),
    so that a new one (contract 20: `require_pushed_authorization_requests`, `require_dpop`) is one
    field here and one check there, and a new grant (the device grant) a value of `grant_types`."""
    registration: Registration
    name: str
    redirect_uris: list[str]
    token_endpoint_auth_method: str
    scopes: list[str]  # the ceiling: what the app may ask for
    webhook_url: str | None = None
    id_token_alg: str = "RS256"  # noqa: S105 (lbauth.core.crypto.keys.ID_TOKEN_DEFAULT_ALG)
    post_logout_redirect_uris: list[str] = field(default_factory=list)
    # kept in `client_metadata` (every field below: `_COLUMNS` names those above)
    grant_types: list[str] = field(default_factory=lambda: list(DEFAULT_GRANT_TYPES))
    response_types: list[str] = field(default_factory=lambda: ["code"])
    application_type: str = "web"
    scope: str | None = None  # the default for a request without `scope`, never a ceiling
    client_uri: str | None = None
    logo_uri: str | None = None
    require_pushed_authorization_requests: bool = False  # RFC 9126 6: no plain request at /oauth/
    dpop_bound_access_tokens: bool = False  # RFC 9449 5.2: every token it gets is DPoP-bound

    @property
    def public(self) -> bool:
        return self.token_endpoint_auth_method == PUBLIC_CLIENT_METHOD

    def extensions(self) -> dict[str, Any]:
        """The `client_metadata` column: the fields without a column, those that have a value (a
        flag only when set)."""
        values = {name: getattr(self, name) for name in _EXTENSIONS}
        return {name: value for name, value in values.items() if value is not None and value is not False}

    def columns(self) -> dict[str, Any]:
        """The app row's columns this metadata fills."""
        return {**{name: getattr(self, name) for name in _COLUMNS}, "registration": self.registration.value,
                "client_metadata": self.extensions()}

    @classmethod
    def of(cls, app: App) -> ClientMetadata:
        """An app's metadata as stored; what `client_metadata` lacks (an operator's app of before
        it was kept) takes the defaults."""
        stored = app.client_metadata or {}
        return cls(Registration(app.registration), **{name: getattr(app, name) for name in _COLUMNS},
                   **{name: stored[name] for name in _EXTENSIONS if name in stored})


# The fields with a column of their own; every other one is kept in `client_metadata`.
_COLUMNS = ("name", "redirect_uris", "token_endpoint_auth_method", "scopes", "webhook_url", "id_token_alg",
            "post_logout_redirect_uris")
_EXTENSIONS = tuple(f.name for f in fields(ClientMetadata) if f.name not in (*_COLUMNS, "registration"))


class _Keep(Enum):
    KEEP = "keep"


KEEP: Final = _Keep.KEEP  # "leave as it is", where None is a value a column may take


@dataclass(frozen=True, slots=True)
class AppChanges:
    """What to change in an app's settings; a field left at None (KEEP, for the nullable ones) is
    not written, so concurrent changes of other settings are not undone."""
    name: str | None = None
    redirect_uris: list[str] | None = None
    scopes: list[str] | None = None
    webhook_url: str | None | Literal[_Keep.KEEP] = KEEP
    webhook_disabled_at: int | None | Literal[_Keep.KEEP] = KEEP
    client_secret_hash: str | None = None
    webhook_secret_sealed: str | None = None
    id_token_alg: str | None = None
    post_logout_redirect_uris: list[str] | None = None
    client_metadata: dict[str, Any] | None = None  # the fields without a column (ClientMetadata.extensions)

    def columns(self) -> dict[str, Any]:
        """The columns to write and their new values."""
        changed = {}
        for column in fields(self):
            value = getattr(self, column.name)
            if value is not KEEP and (value is not None or column.name in _NULLABLE):
                changed[column.name] = value
        return changed


_NULLABLE = ("webhook_url", "webhook_disabled_at")


@dataclass(frozen=True, slots=True)
class Grant:
    """A user's live grant to an app, with the app-scoped user id (None until one is made)."""
    id: str
    app_id: str
    user_id: str
    scopes: list[str]
    created_at: int
    updated_at: int
    revoked_at: int | None
    resources: list[str]
    asu: str | None


@dataclass(frozen=True, slots=True)
class UserGrant:
    """A live grant as its user sees it (contract section 7): with the app's client id and name."""
    id: str
    app_id: str
    user_id: str
    scopes: list[str]
    created_at: int
    updated_at: int
    revoked_at: int | None
    resources: list[str]
    client_id: str
    app_name: str


@dataclass(frozen=True, slots=True)
class CodeGrant:
    """The live grant a code was just issued under, and that grant's scopes and resources (None
    when the request named no resource: they were not read)."""
    grant_id: str
    grant_scopes: list[str]
    grant_resources: list[str] | None


@dataclass(frozen=True, slots=True)
class Code:
    """An authorization code (spec section 2), by digest."""
    code_hash: str
    app_id: str
    user_id: str
    grant_id: str
    asu: str
    redirect_uri: str
    scopes: list[str]
    code_challenge: str | None
    created_at: int
    expires_at: int
    used_at: int | None
    revoked_at: int | None
    access_jti: str | None
    id_token_alg: str | None
    nonce: str | None
    auth_time: int | None
    session_id: str | None
    resources: list[str]
    amr: str
    dpop_jkt: str | None


@dataclass(frozen=True, slots=True)
class Authentication:
    """What the user's sign-in behind a code proved (RFC 8176 `amr` values, space-separated) and
    when (`auth_time`): its tokens carry both (contract 19)."""
    auth_time: int
    amr: str


@dataclass(frozen=True, slots=True)
class OpenIdDetails:
    """What an OpenID request's code remembers for its ID token (contract 15)."""
    id_token_alg: str
    nonce: str | None
    session_id: str | None


@dataclass(frozen=True, slots=True)
class ClaimedCode:
    """What a code redeemed just now was issued for (spec 4.3), and its ID token's details when
    it was an OpenID request (contract 15; `id_token_alg` None otherwise)."""
    app_id: str
    user_id: str
    grant_id: str
    asu: str
    scopes: list[str]
    id_token_alg: str | None
    nonce: str | None
    auth_time: int | None
    session_id: str | None
    resources: list[str]  # RFC 8707: what its tokens may name (contract 17)
    amr: str


class CodeRule(Enum):
    """A condition a redemption claims a code under (spec 4.3, RFC 6749 4.1.3, RFC 7636 4.6), in
    the order a failed redemption is explained. Each is one SQL condition (repo/codes.py), used
    both by the claim and by the explanation of a failed claim, so the two cannot disagree."""
    ISSUED_TO_CLIENT = "issued_to_client"  # the client presenting it, matched by its secret's digest
    NOT_REVOKED = "not_revoked"
    UNUSED = "unused"
    UNEXPIRED = "unexpired"
    SAME_REDIRECT_URI = "same_redirect_uri"  # the authorization request's, exactly
    PKCE_VERIFIED = "pkce_verified"  # the verifier's challenge, or none sent for a code without one
    SAME_DPOP_KEY = "same_dpop_key"  # RFC 9449 10: the proof's key, for a code bound to one


# A code or refresh token bound to no key in particular, that still needs a DPoP proof (an app
# registered with `dpop_bound_access_tokens`, a confidential client's grant begun with DPoP).
DPOP_ANY_KEY: Final = "*"


@dataclass(frozen=True, slots=True)
class ProvenKey:
    """The key a request's DPoP proof showed its client holds (RFC 9449 4.3): `jkt`, its thumbprint,
    which binds tokens; and the proof's digest, by which its single use is recorded, until
    `remember_until`, when the proof is too old to be accepted anyway (11.1)."""
    jkt: str
    proof_hash: str = field(repr=False)
    remember_until: int


@dataclass(frozen=True, slots=True)
class CodeState:
    """Why a code was not claimed: the rules it breaks for this request (in CodeRule order; none
    for a code that would be claimed now), and what explaining them needs."""
    broken: tuple[CodeRule, ...]
    grant_id: str
    resources: list[str]
    has_challenge: bool


@dataclass(frozen=True, slots=True)
class RefreshToken:
    """A refresh token (spec section 3), by digest."""
    token_hash: str
    app_id: str
    user_id: str
    grant_id: str
    code_hash: str | None
    asu: str
    scopes: list[str]
    created_at: int
    expires_at: int
    revoked_at: int | None
    auth_time: int | None
    session_id: str | None
    resources: list[str]
    rotated_at: int | None
    amr: str
    dpop_jkt: str | None  # RFC 9449 5; DPOP_ANY_KEY: a proof of any key


@dataclass(frozen=True, slots=True)
class DeviceCode:
    """A device authorization (RFC 8628 3.2), by the digests of its device code and user code:
    what the device asked for, how often it may poll, and, once the user approved, what its
    tokens are issued for (the grant, the app-scoped id, the approving session's sign-in, and
    for an OpenID request the ID tokens' algorithm)."""
    device_code_hash: str
    user_code_hash: str
    app_id: str
    scopes: list[str]
    resources: list[str]  # RFC 8707: the registered resources' URIs
    created_at: int
    expires_at: int
    interval: int  # seconds between polls; grows by 5 at each slow_down
    last_polled_at: int | None
    user_id: str | None
    grant_id: str | None
    asu: str | None
    approved_at: int | None
    denied_at: int | None  # by the user, or by a revocation of the grant it was approved under
    used_at: int | None  # its tokens were issued: once
    auth_time: int | None
    amr: str | None
    session_id: str | None
    id_token_alg: str | None


@dataclass(frozen=True, slots=True)
class ClientRefreshToken(RefreshToken):
    """A refresh token found for the client presenting it, with that app's ID-token algorithm."""
    id_token_alg: str


class KeyRole(StrEnum):
    """What an active signing key signs (contract 8)."""
    ACCESS_TOKENS = "access_tokens"  # access tokens, and the ID tokens of its algorithm: one key at a time
    ID_TOKENS = "id_tokens"  # the ID tokens of its algorithm only


@dataclass(frozen=True, slots=True)
class SigningKey:
    """A JWS signing key (contract section 8), its private part sealed under the master key. A
    staged key's role is settled when it is promoted; a retiring one keeps the role it had."""
    kid: str
    alg: str
    state: str
    public_jwk: dict[str, Any]
    private_key_sealed: str = field(repr=False)
    created_at: int
    activated_at: int | None
    deactivated_at: int | None
    retired_at: int | None
    role: str = KeyRole.ID_TOKENS  # a KeyRole


@dataclass(frozen=True, slots=True)
class Change:
    """An entry of the change feed (contract sections 7 and 16), naming exactly one of: a revoked
    grant (its tokens issued at or before `changed_at`), a revoked access token, an ended session,
    a changed user. `id` is the feed's cursor."""
    id: int
    grant_id: str | None
    jti: str | None
    changed_at: int
    expires_at: int
    session_id: str | None
    user_id: str | None


@dataclass(frozen=True, slots=True)
class WebhookEvent:
    """An event of the webhook outbox (contract section 10) and where its app wants it sent."""
    id: str
    app_id: str
    event_type: str
    reason: str
    asu: str
    payload: str
    status: str
    attempts: int
    round_attempts: int
    last_status: int | None
    last_error: str | None
    next_attempt_at: int | None
    lease_until: int | None
    created_at: int
    delivered_at: int | None
    traceparent: str | None  # the W3C trace context of the change that queued it, when tracing is on
    client_id: str
    webhook_url: str | None
    webhook_secret_sealed: str = field(repr=False)
    webhook_disabled_at: int | None


@dataclass(frozen=True, slots=True)
class WebhookAttempt:
    """One delivery attempt of a webhook event."""
    id: int
    event_id: str
    attempted_at: int
    status: int | None
    latency_ms: int
    error: str | None


@dataclass(frozen=True, slots=True)
class Resource:
    """A protected resource (RFC 8707, contract 17): `uri` as the operator gave it (what `aud`
    carries), `normalized` its RFC 3986 6.2.2 form, `scopes` the only ones its tokens may carry
    (None: every scope)."""
    uri: str
    normalized: str
    name: str
    scopes: list[str] | None
    created_at: int


@dataclass(frozen=True, slots=True)
class MailMessage:
    """A message of the mail outbox (contract 18): what was asked for, and once composed the letter,
    both sealed under the master key."""
    id: str
    kind: str
    recipient: str
    params_sealed: str = field(repr=False)
    letter_sealed: str | None = field(repr=False)
    status: str
    attempts: int
    round_attempts: int
    last_error: str | None
    next_attempt_at: int | None
    lease_until: int | None
    created_at: int
    sent_at: int | None


@dataclass(frozen=True, slots=True)
class LinkToken:
    """An emailed link's token, by digest (contract 18)."""
    token_hash: str
    kind: str
    user_id: str | None
    email: str
    payload_sealed: str | None = field(repr=False)
    created_at: int
    expires_at: int
    used_at: int | None


@dataclass(frozen=True, slots=True)
class Passkey:
    """A user's passkey (contract 19), the passkeys table whole."""
    id: str
    user_id: str
    credential_id: str = field(repr=False)
    public_key: str = field(repr=False)
    sign_count: int
    backup_eligible: bool
    backed_up: bool
    name: str
    created_at: int
    last_used_at: int | None


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One event of the audit log (contract 21), the audit_events table whole."""
    seq: int  # its place in the log, the cursor of a user's page
    event_id: str
    occurred_at: int
    type: str
    actor_type: str  # user, operator, client or system
    actor_id: str | None
    user_id: str | None  # the user concerned
    ip_address: str | None
    user_agent: str | None
    outcome: str
    detail: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class ListedAuditEvent:
    """An event as operators list it: with the email of the user concerned (None once deleted)."""
    event: AuditEvent
    email: str | None
