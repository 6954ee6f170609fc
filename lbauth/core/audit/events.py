"""What an audit event says (contract 21), and `record`, the one way to write one.

`record` takes the caller's connection: the event is written in the unit of work of the change it
records, so a crash leaves both or neither, and it costs one INSERT in a transaction that is
happening anyway. Who acted is an `Actor` (a user on their own account, an operator at the command
line, a client registering itself, or the server itself); where a request came from, a `Source`
(the TCP peer and the first 200 characters of its User-Agent), handed down by the handlers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from lbauth.core.crypto import opaque
from lbauth.storage import Connection
from lbauth.storage.repo import audit as repo

USER_AGENT_LENGTH = 200  # as a session keeps it (contract 16)
ADDRESS_LENGTH = 64


class EventType(StrEnum):
    """The events recorded, as `type` names them (API, CLI, SQL)."""
    SIGN_IN = "sign_in"  # outcome success, failure, or pending (the password was right; a second step is asked)
    SECOND_STEP = "second_step"  # success or failure; detail `method`: totp, recovery_code or passkey
    PASSKEY_ADDED = "passkey.added"
    PASSKEY_REMOVED = "passkey.removed"
    TOTP_ADDED = "totp.added"
    TOTP_REMOVED = "totp.removed"
    RECOVERY_CODE_USED = "recovery_code.used"
    RECOVERY_CODES_REGENERATED = "recovery_codes.regenerated"
    FACTORS_RESET = "factors.reset"  # an operator removed every second factor
    PASSWORD_CHANGED = "password.changed"  # noqa: S105 (an event's name)
    PASSWORD_RESET = "password.reset"  # noqa: S105 (an event's name): with an emailed link
    EMAIL_CHANGED = "email.changed"
    EMAIL_VERIFIED = "email.verified"
    CONSENT_GIVEN = "consent.given"  # a grant made, or widened to more scopes or resources
    AUTHORIZATION_REVOKED = "authorization.revoked"
    SESSION_ENDED = "session.ended"
    APP_CREATED = "app.created"
    SECRET_ROTATED = "app.secret_rotated"  # noqa: S105 (an event's name): detail `secret`, client or webhook
    CLIENT_REGISTERED = "client.registered"  # dynamic registration (RFC 7591) or a metadata document
    KEY_ROTATED = "key.rotated"  # detail `step`: stage, promote, retire (signing keys) or reseal (master key)
    USER_DISABLED = "user.disabled"
    USER_ENABLED = "user.enabled"
    USER_DELETED = "user.deleted"


class Outcome(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"
    PENDING = "pending"


class ActorKind(StrEnum):
    USER = "user"
    OPERATOR = "operator"
    CLIENT = "client"
    SYSTEM = "system"


@dataclass(frozen=True)
class Actor:
    """Who did it: a user (their id), an operator (their login name at the command line), a
    client (its client id), or the server itself (no id)."""
    kind: ActorKind
    id: str | None = None

    @classmethod
    def user(cls, user_id: str | None) -> Actor:
        return cls(ActorKind.USER, user_id)

    @classmethod
    def operator(cls, name: str | None) -> Actor:
        return cls(ActorKind.OPERATOR, name or None)

    @classmethod
    def client(cls, client_id: str) -> Actor:
        return cls(ActorKind.CLIENT, client_id)


SYSTEM = Actor(ActorKind.SYSTEM)
OPERATOR = Actor(ActorKind.OPERATOR)  # an operator whose name is not known


@dataclass(frozen=True)
class Source:
    """Where a request came from: the TCP peer's address and its User-Agent header (each cut to
    what is stored). Empty for what no request caused (the command line, the server's own jobs)."""
    ip_address: str = ""
    user_agent: str = ""


NO_SOURCE = Source()


def record(conn: Connection, now: int, event: EventType, actor: Actor, *, user_id: str | None = None,
           source: Source = NO_SOURCE, outcome: Outcome = Outcome.SUCCESS,
           detail: Mapping[str, str | int | None] | None = None) -> str:
    """Write one event in the caller's unit of work; its `eventId`. `user_id`: the user concerned
    (a user acting on their own account when not given). `detail`: a few values that say what (a
    method, a client id, a key id), never personal data; None values are left out."""
    if user_id is None and actor.kind == ActorKind.USER:
        user_id = actor.id
    event_id = opaque.new_id("aev_")
    kept = {name: value for name, value in (detail or {}).items() if value is not None}
    repo.insert_event(conn, event_id=event_id, occurred_at=now, type=event.value, actor_type=actor.kind.value,
                      actor_id=actor.id, user_id=user_id,
                      ip_address=source.ip_address[:ADDRESS_LENGTH] or None,
                      user_agent=source.user_agent[:USER_AGENT_LENGTH] or None, outcome=outcome.value,
                      detail=kept or None)
    return event_id
