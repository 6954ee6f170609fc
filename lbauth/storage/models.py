"""The schema: typed SQLAlchemy models, one per stored artifact.

Times are whole Unix seconds (BigInteger) read from the injected clock, so SQLite and PostgreSQL
store them alike. Opaque credentials appear only as SHA-256 digests (`*_hash`); secrets that must
be read back (webhook secrets, private signing keys) only sealed under the master key (`*_sealed`).
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from lbauth.storage.records import Registration

# Named constraints, so Alembic migrations (batch mode on SQLite) can address them.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

Id = String(40)
Digest = String(64)
Time = BigInteger
Serial = BigInteger().with_variant(Integer, "sqlite")  # SQLite autoincrements only INTEGER keys


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class User(Base):
    __tablename__ = "users"
    id: Mapped[str] = mapped_column(Id, primary_key=True)  # usr_...
    email: Mapped[str] = mapped_column(String(320), unique=True)  # stored lower-cased
    name: Mapped[str] = mapped_column(String(200))
    avatar: Mapped[str] = mapped_column(Text, default="")
    bio: Mapped[str] = mapped_column(Text, default="")
    interest_tags: Mapped[list[str]] = mapped_column(JSON, default=list)
    password_hash: Mapped[str] = mapped_column(String(200))  # argon2id; "" once deleted
    created_at: Mapped[int] = mapped_column(Time)
    disabled_at: Mapped[int | None] = mapped_column(Time)  # by an operator (contract 16)
    deleted_at: Mapped[int | None] = mapped_column(Time)  # erased: the row keeps only its id and times
    email_verified: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    # Has a second factor (contract 19): only then does a sign-in read the factors.
    mfa: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))


class Session(Base):
    """Server-side sessions (contract section 16): every user token (`kind` api) and browser
    sign-in (`kind` browser). The credential (`lba_ut_`, also the cookie's value) by digest."""
    __tablename__ = "sessions"
    id: Mapped[str] = mapped_column(Id, primary_key=True)  # ses_...
    token_hash: Mapped[str] = mapped_column(Digest, unique=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[int] = mapped_column(Time)
    last_used_at: Mapped[int] = mapped_column(Time)
    expires_at: Mapped[int] = mapped_column(Time)
    ended_at: Mapped[int | None] = mapped_column(Time)
    user_agent: Mapped[str] = mapped_column(String(200), default="")
    ip_address: Mapped[str] = mapped_column(String(64), default="")
    # The user's last sign-in in this session (OpenID auth_time): a new sign-in asked for by
    # prompt=login or max_age moves it.
    authenticated_at: Mapped[int] = mapped_column(Time, default=0, server_default=text("0"))
    # What that sign-in proved: RFC 8176 `amr` values, space-separated ("pwd", "pwd otp mfa", ...).
    amr: Mapped[str] = mapped_column(String(64), default="pwd", server_default="pwd")


class App(Base):
    """A registered client application (spec section 1, contract section 2)."""
    __tablename__ = "apps"
    id: Mapped[str] = mapped_column(Id, primary_key=True)  # app_...
    client_id: Mapped[str] = mapped_column(String(2048), unique=True)  # cid_..., or a metadata document's URL
    name: Mapped[str] = mapped_column(String(200))
    owner_id: Mapped[str | None] = mapped_column(ForeignKey("users.id"), index=True)  # None: registered by the client
    client_secret_hash: Mapped[str] = mapped_column(Digest)
    redirect_uris: Mapped[list[str]] = mapped_column(JSON)
    scopes: Mapped[list[str]] = mapped_column(JSON)
    webhook_url: Mapped[str | None] = mapped_column(Text)
    webhook_secret_sealed: Mapped[str] = mapped_column(Text)
    webhook_disabled_at: Mapped[int | None] = mapped_column(Time)  # set by a 410 answer
    created_at: Mapped[int] = mapped_column(Time)
    updated_at: Mapped[int] = mapped_column(Time)
    id_token_alg: Mapped[str] = mapped_column(String(16), default="RS256", server_default=text("'RS256'"))
    post_logout_redirect_uris: Mapped[list[str]] = mapped_column(JSON, default=list, server_default=text("'[]'"))
    # Contract 17: `none` is a public client (no secret, client_secret_hash ""); how it came to be
    # (`operator`, `dynamic` RFC 7591, `document` a client ID metadata document); the RFC 7592
    # registration access token's digest; the registered metadata that has no column of its own
    # (records.ClientMetadata.extensions, echoed by RFC 7592 reads); when a metadata document's
    # cached copy must be fetched again.
    token_endpoint_auth_method: Mapped[str] = mapped_column(
        String(32), default="client_secret_basic", server_default=text("'client_secret_basic'"))
    registration: Mapped[str] = mapped_column(String(16), default=Registration.OPERATOR.value,
                                              server_default=text(f"'{Registration.OPERATOR}'"))
    registration_token_hash: Mapped[str | None] = mapped_column(Digest)
    client_metadata: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    document_expires_at: Mapped[int | None] = mapped_column(Time)


class Resource(Base):
    """A protected resource (RFC 8707, contract 17): `uri` as the operator gave it (what `aud`
    carries), `normalized` its RFC 3986 6.2.2 form (what requests are matched by), `scopes` the
    only ones a token for it may carry (None: every scope)."""
    __tablename__ = "resources"
    uri: Mapped[str] = mapped_column(String(2048), primary_key=True)
    normalized: Mapped[str] = mapped_column(String(2048), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    scopes: Mapped[list[str] | None] = mapped_column(JSON)
    created_at: Mapped[int] = mapped_column(Time)


class RegistrationToken(Base):
    """Initial access tokens for RFC 7591 registration (`lbauth registration-tokens create`), by digest."""
    __tablename__ = "registration_tokens"
    token_hash: Mapped[str] = mapped_column(Digest, primary_key=True)
    created_at: Mapped[int] = mapped_column(Time)
    expires_at: Mapped[int] = mapped_column(Time)


class Subject(Base):
    """The app-scoped user id (`asu_`): made once per (app, user), never changed."""
    __tablename__ = "subjects"
    app_id: Mapped[str] = mapped_column(ForeignKey("apps.id", ondelete="CASCADE"), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
    asu: Mapped[str] = mapped_column(String(48), unique=True)
    created_at: Mapped[int] = mapped_column(Time)


class Grant(Base):
    """A user's consent to an app: one live grant per (user, app), its scopes a union of approvals.

    `resources` here, on codes and on refresh tokens has a server default only: a Python-side
    default would make every hot-path INSERT fetch it first, off the SQLite fast path (storage/db)."""
    __tablename__ = "grants"
    id: Mapped[str] = mapped_column(Id, primary_key=True)  # gnt_...
    app_id: Mapped[str] = mapped_column(ForeignKey("apps.id", ondelete="CASCADE"))
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    scopes: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[int] = mapped_column(Time)
    updated_at: Mapped[int] = mapped_column(Time)
    revoked_at: Mapped[int | None] = mapped_column(Time)
    resources: Mapped[list[str]] = mapped_column(JSON, server_default=text("'[]'"))  # RFC 8707

    __table_args__ = (
        Index("uq_grants_live", "user_id", "app_id", unique=True,
              sqlite_where=text("revoked_at IS NULL"), postgresql_where=text("revoked_at IS NULL")),
    )


class AuthorizationCode(Base):
    """Spec section 2: single use, 5 minutes. Remembers all a redemption must check (contract 5)."""
    __tablename__ = "authorization_codes"
    code_hash: Mapped[str] = mapped_column(Digest, primary_key=True)
    app_id: Mapped[str] = mapped_column(ForeignKey("apps.id", ondelete="CASCADE"))
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    grant_id: Mapped[str] = mapped_column(ForeignKey("grants.id", ondelete="CASCADE"), index=True)
    asu: Mapped[str] = mapped_column(String(48))
    redirect_uri: Mapped[str] = mapped_column(Text)
    scopes: Mapped[list[str]] = mapped_column(JSON)
    code_challenge: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[int] = mapped_column(Time)
    expires_at: Mapped[int] = mapped_column(Time, index=True)
    used_at: Mapped[int | None] = mapped_column(Time)
    revoked_at: Mapped[int | None] = mapped_column(Time)
    access_jti: Mapped[str | None] = mapped_column(String(64))  # what the redemption issued
    # An OpenID request's (contract 15): what its ID token will say, and with which algorithm
    # (the app's at authorization); NULL for a plain OAuth code.
    id_token_alg: Mapped[str | None] = mapped_column(String(16))
    nonce: Mapped[str | None] = mapped_column(Text)
    auth_time: Mapped[int | None] = mapped_column(Time)
    session_id: Mapped[str | None] = mapped_column(Id)
    resources: Mapped[list[str]] = mapped_column(JSON, server_default=text("'[]'"))  # RFC 8707
    amr: Mapped[str] = mapped_column(String(64), default="pwd", server_default="pwd")  # its session's sign-in
    # RFC 9449 10: the key the exchange's proof must be made with; DPOP_ANY_KEY: any key, but one.
    dpop_jkt: Mapped[str | None] = mapped_column(String(64))


class RefreshToken(Base):
    """`lba_rt_` tokens, by digest; bound to their app. A confidential app's are not rotated (spec
    section 3); a public client's are (contract 17): `rotated_at` marks the retired one."""
    __tablename__ = "refresh_tokens"
    token_hash: Mapped[str] = mapped_column(Digest, primary_key=True)
    app_id: Mapped[str] = mapped_column(ForeignKey("apps.id", ondelete="CASCADE"))
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    grant_id: Mapped[str] = mapped_column(ForeignKey("grants.id", ondelete="CASCADE"), index=True)
    code_hash: Mapped[str | None] = mapped_column(Digest, index=True)  # the code it came from
    asu: Mapped[str] = mapped_column(String(48))
    scopes: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[int] = mapped_column(Time)
    expires_at: Mapped[int] = mapped_column(Time, index=True)
    revoked_at: Mapped[int | None] = mapped_column(Time)
    auth_time: Mapped[int | None] = mapped_column(Time)  # its code's sign-in: its tokens keep it (NULL before 0009)
    session_id: Mapped[str | None] = mapped_column(Id)
    resources: Mapped[list[str]] = mapped_column(JSON, server_default=text("'[]'"))  # RFC 8707
    rotated_at: Mapped[int | None] = mapped_column(Time)
    amr: Mapped[str] = mapped_column(String(64), default="pwd", server_default="pwd")  # its code's
    # RFC 9449 5: a public client's refresh token works only with a proof of this key; DPOP_ANY_KEY:
    # a confidential client's, with a proof of any key (its grant began with DPoP).
    dpop_jkt: Mapped[str | None] = mapped_column(String(64))


class SigningKey(Base):
    """JWS keys (contract section 8). state: staged -> active -> retiring -> retired; one active
    key per algorithm, and one active key with the access-token role."""
    __tablename__ = "signing_keys"
    kid: Mapped[str] = mapped_column(String(64), primary_key=True)  # RFC 7638 thumbprint
    alg: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(16))
    public_jwk: Mapped[dict[str, Any]] = mapped_column(JSON)
    private_key_sealed: Mapped[str] = mapped_column(Text)
    created_at: Mapped[int] = mapped_column(Time)
    activated_at: Mapped[int | None] = mapped_column(Time)
    deactivated_at: Mapped[int | None] = mapped_column(Time)
    retired_at: Mapped[int | None] = mapped_column(Time)
    # What it signs while active (records.KeyRole): the one access-token key, or an ID-token key.
    role: Mapped[str] = mapped_column(String(16), server_default=text("'id_tokens'"))

    __table_args__ = (
        Index("uq_signing_keys_active", "alg", unique=True,
              sqlite_where=text("state = 'active'"), postgresql_where=text("state = 'active'")),
        Index("uq_signing_keys_access_tokens", "role", unique=True,
              sqlite_where=text("state = 'active' AND role = 'access_tokens'"),
              postgresql_where=text("state = 'active' AND role = 'access_tokens'")),
    )


class Change(Base):
    """The change feed (contract sections 7 and 16), read by cursor (`id`) by every process and, for
    its grant and token entries, by offline verifiers: the revocation check-list, a grant id or an
    access token jti kept until the longest-lived access token it could cover has expired; and the
    account changes every process must hear of, not published: a session ended (`session_id`) or a
    user changed (`user_id`)."""
    __tablename__ = "changes"
    id: Mapped[int] = mapped_column(Serial, primary_key=True, autoincrement=True)
    grant_id: Mapped[str | None] = mapped_column(Id)
    jti: Mapped[str | None] = mapped_column(String(64))
    changed_at: Mapped[int] = mapped_column(Time)
    expires_at: Mapped[int] = mapped_column(Time, index=True)
    session_id: Mapped[str | None] = mapped_column(Id)
    user_id: Mapped[str | None] = mapped_column(Id)


class WebhookEvent(Base):
    """The transactional outbox (contract section 10). `payload` is the exact body, signed afresh
    at every attempt. status: pending -> delivered | failed."""
    __tablename__ = "webhook_events"
    id: Mapped[str] = mapped_column(Id, primary_key=True)  # evt_...
    app_id: Mapped[str] = mapped_column(ForeignKey("apps.id", ondelete="CASCADE"), index=True)
    event_type: Mapped[str] = mapped_column(String(64))
    reason: Mapped[str] = mapped_column(String(32))
    asu: Mapped[str] = mapped_column(String(48))
    payload: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    round_attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # since (re)delivery
    last_status: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    next_attempt_at: Mapped[int | None] = mapped_column(Time)
    lease_until: Mapped[int | None] = mapped_column(Time)
    created_at: Mapped[int] = mapped_column(Time)
    delivered_at: Mapped[int | None] = mapped_column(Time)
    traceparent: Mapped[str | None] = mapped_column(String(55))  # W3C Trace Context, when tracing is on

    __table_args__ = (Index("ix_webhook_events_due", "status", "next_attempt_at"),)


class WebhookAttempt(Base):
    """One delivery attempt: when, the HTTP status (None if no answer), latency and error."""
    __tablename__ = "webhook_attempts"
    id: Mapped[int] = mapped_column(Serial, primary_key=True, autoincrement=True)
    event_id: Mapped[str] = mapped_column(ForeignKey("webhook_events.id", ondelete="CASCADE"), index=True)
    attempted_at: Mapped[int] = mapped_column(Time)
    status: Mapped[int | None] = mapped_column(Integer)
    latency_ms: Mapped[int] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)


class MailMessage(Base):
    """The mail outbox (contract 18): what a request asked to be sent, written in its transaction,
    then composed and sent by every process's mailer, at least once, with retries. `params_sealed`
    is what the request asked for (it may hold a pending account's name and password hash);
    `letter_sealed` the message once composed (it holds its one link): both sealed under the master
    key. status: pending -> sent | failed | dropped (composing found nothing to send)."""
    __tablename__ = "mail_messages"
    id: Mapped[str] = mapped_column(Id, primary_key=True)  # msg_...
    kind: Mapped[str] = mapped_column(String(32))
    recipient: Mapped[str] = mapped_column(String(320))
    params_sealed: Mapped[str] = mapped_column(Text)
    letter_sealed: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    round_attempts: Mapped[int] = mapped_column(Integer, default=0)  # since (re)delivery
    last_error: Mapped[str | None] = mapped_column(Text)
    next_attempt_at: Mapped[int | None] = mapped_column(Time)
    lease_until: Mapped[int | None] = mapped_column(Time)
    created_at: Mapped[int] = mapped_column(Time)
    sent_at: Mapped[int | None] = mapped_column(Time)

    __table_args__ = (Index("ix_mail_messages_due", "status", "next_attempt_at"),)


class LinkToken(Base):
    """The tokens of emailed links (contract 18), by digest: `lba_su_` sign-up, `lba_ev_` email
    verification, `lba_ec_` email change, `lba_pr_` password reset. Single use (`used_at`); a
    newer reset voids the older ones of its user. `email` is the address the link went to;
    `payload_sealed` a pending sign-up's name, password hash and return address."""
    __tablename__ = "link_tokens"
    token_hash: Mapped[str] = mapped_column(Digest, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    user_id: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    email: Mapped[str] = mapped_column(String(320))
    payload_sealed: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[int] = mapped_column(Time)
    expires_at: Mapped[int] = mapped_column(Time, index=True)
    used_at: Mapped[int | None] = mapped_column(Time)


class TotpFactor(Base):
    """A user's TOTP authenticator (RFC 6238, contract 19): the secret sealed under the master key;
    `confirmed_at` NULL until a first code proved enrolment; `last_step`, the time step of the last
    code accepted, so a code is never accepted twice."""
    __tablename__ = "totp_factors"
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
    secret_sealed: Mapped[str] = mapped_column(Text)
    created_at: Mapped[int] = mapped_column(Time)
    confirmed_at: Mapped[int | None] = mapped_column(Time)
    last_step: Mapped[int] = mapped_column(Time, default=0, server_default=text("0"))


class RecoveryCode(Base):
    """A user's single-use recovery codes (contract 19), by digest."""
    __tablename__ = "recovery_codes"
    code_hash: Mapped[str] = mapped_column(Digest, primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[int] = mapped_column(Time)
    used_at: Mapped[int | None] = mapped_column(Time)


class Passkey(Base):
    """A user's passkey (WebAuthn, contract 19): the credential's id and public key (COSE), both
    base64url; the authenticator's signature counter and backup flags as last seen (`backup_eligible`:
    a synced passkey, RFC 8176 `swk`; otherwise `hwk`); the name the user gave it."""
    __tablename__ = "passkeys"
    id: Mapped[str] = mapped_column(Id, primary_key=True)  # pk_...
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    credential_id: Mapped[str] = mapped_column(String(1400), unique=True)
    public_key: Mapped[str] = mapped_column(Text)
    sign_count: Mapped[int] = mapped_column(BigInteger)
    backup_eligible: Mapped[bool] = mapped_column(Boolean)
    backed_up: Mapped[bool] = mapped_column(Boolean)
    name: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[int] = mapped_column(Time)
    last_used_at: Mapped[int | None] = mapped_column(Time)


class PushedRequest(Base):
    """A pushed authorization request (RFC 9126), by the digest of its `request_uri`: the client's
    parameters as it pushed them (name -> every value), then as the authorization endpoint left
    them for the next page (a sign-in asked for by `prompt=login` is not asked again). Unused, it
    lives 60 seconds; its first use gives the user time to sign in (`expires_at` moves once);
    `completed_at`: a code or an error went back to the client, and the request is spent."""
    __tablename__ = "pushed_requests"
    request_hash: Mapped[str] = mapped_column(Digest, primary_key=True)
    app_id: Mapped[str] = mapped_column(ForeignKey("apps.id", ondelete="CASCADE"), index=True)
    parameters: Mapped[dict[str, list[str]]] = mapped_column(JSON)
    created_at: Mapped[int] = mapped_column(Time)
    expires_at: Mapped[int] = mapped_column(Time, index=True)
    first_used_at: Mapped[int | None] = mapped_column(Time)
    completed_at: Mapped[int | None] = mapped_column(Time)


class DPoPProof(Base):
    """A DPoP proof seen (RFC 9449 11.1), by the digest of its key's thumbprint and its `jti`, until
    it is too old to be accepted anyway: each proof is used once across every process. One B-tree
    a row on SQLite (WITHOUT ROWID), no index on `expires_at`: every DPoP request inserts a row, and
    the purge of old ones reads the table, which holds two minutes of proofs (migration 0016)."""
    __tablename__ = "dpop_proofs"
    __table_args__ = {"sqlite_with_rowid": False}
    proof_hash: Mapped[str] = mapped_column(Digest, primary_key=True)
    expires_at: Mapped[int] = mapped_column(Time)


class DeviceCode(Base):
    """A device authorization (RFC 8628), by the digests of its device code (`lba_dc_`) and of its
    user code (8 letters, normalised): 10 minutes to approve or deny, then one redemption."""
    __tablename__ = "device_codes"
    device_code_hash: Mapped[str] = mapped_column(Digest, primary_key=True)
    user_code_hash: Mapped[str] = mapped_column(Digest, unique=True)
    app_id: Mapped[str] = mapped_column(ForeignKey("apps.id", ondelete="CASCADE"), index=True)
    scopes: Mapped[list[str]] = mapped_column(JSON)
    resources: Mapped[list[str]] = mapped_column(JSON)  # RFC 8707
    created_at: Mapped[int] = mapped_column(Time)
    expires_at: Mapped[int] = mapped_column(Time, index=True)
    interval: Mapped[int] = mapped_column(Integer)  # seconds between polls: 5, then 5 more at each slow_down
    last_polled_at: Mapped[int | None] = mapped_column(Time)
    # Set when the user approves: the grant created or extended, as a code's (contract 5, 19).
    user_id: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    grant_id: Mapped[str | None] = mapped_column(ForeignKey("grants.id", ondelete="CASCADE"), index=True)
    asu: Mapped[str | None] = mapped_column(String(48))
    approved_at: Mapped[int | None] = mapped_column(Time)
    denied_at: Mapped[int | None] = mapped_column(Time)  # by the user, or its grant revoked before use
    used_at: Mapped[int | None] = mapped_column(Time)
    auth_time: Mapped[int | None] = mapped_column(Time)
    amr: Mapped[str | None] = mapped_column(String(64))
    session_id: Mapped[str | None] = mapped_column(Id)  # an OpenID request's: the ID token's `sid`
    id_token_alg: Mapped[str | None] = mapped_column(String(16))



class AuditEvent(Base):
    """The audit log (contract 21): one security event, written in the unit of work of the change it
    records. `seq` orders the log (a user's page is read newest first by it, its cursor a `seq`);
    `event_id` is its public id. `actor_type` is user, operator, client or system, `actor_id` its id
    (a user id, the operator's login name, a client id; none for the system). `user_id`: the user
    concerned, if any. `ip_address` and `user_agent` (the first 200 characters) come from the
    request; a deleted user's rows keep neither (contract 16). `detail`: a few words of what (a
    method, an app's client id), never personal data."""
    __tablename__ = "audit_events"
    seq: Mapped[int] = mapped_column(Serial, primary_key=True, autoincrement=True)
    event_id: Mapped[str] = mapped_column(Id)  # aev_...
    occurred_at: Mapped[int] = mapped_column(Time, index=True)  # retention deletes by it
    type: Mapped[str] = mapped_column(String(40))
    actor_type: Mapped[str] = mapped_column(String(16))
    actor_id: Mapped[str | None] = mapped_column(String(2048))
    user_id: Mapped[str | None] = mapped_column(Id)
    ip_address: Mapped[str | None] = mapped_column(String(64))
    user_agent: Mapped[str | None] = mapped_column(String(200))
    outcome: Mapped[str] = mapped_column(String(16))
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSON)

    __table_args__ = (
        Index("ix_audit_events_user", "user_id", "seq"),  # a user's events, newest first, by cursor
        Index("ix_audit_events_type", "type", "seq"),  # `lbauth audit list --type`
    )

def _table(model: type[Base]) -> Table:
    return cast(Table, model.__table__)


users = _table(User)
sessions = _table(Session)
apps = _table(App)
subjects = _table(Subject)
grants = _table(Grant)
authorization_codes = _table(AuthorizationCode)
refresh_tokens = _table(RefreshToken)
signing_keys = _table(SigningKey)
resources = _table(Resource)
registration_tokens = _table(RegistrationToken)
changes = _table(Change)
webhook_events = _table(WebhookEvent)
webhook_attempts = _table(WebhookAttempt)
mail_messages = _table(MailMessage)
link_tokens = _table(LinkToken)
totp_factors = _table(TotpFactor)
recovery_codes = _table(RecoveryCode)
passkeys = _table(Passkey)
pushed_requests = _table(PushedRequest)
dpop_proofs = _table(DPoPProof)
device_codes = _table(DeviceCode)
audit_events = _table(AuditEvent)
