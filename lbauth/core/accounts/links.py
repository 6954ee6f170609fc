"""The tokens of emailed links (contract 18): 256 random bits behind a prefix that names the
link's purpose, stored only as a SHA-256 digest, compared in constant time, single use.

Sign-up and email links live a day; a reset link 30 minutes, and a newer reset request voids the
older links of its user. The same table holds the pending second step of a sign-in (`lba_mt_`,
5 minutes, single use) and the challenges of passkey ceremonies (`lba_pk_`, 5 minutes, single
use), which are never emailed.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlencode

from lbauth.core.crypto import opaque
from lbauth.core.crypto.masterkey import MasterKeys
from lbauth.storage import Connection
from lbauth.storage.records import LinkToken
from lbauth.storage.repo import links as repo


class LinkKind(StrEnum):
    SIGNUP = "signup"
    VERIFY = "verify"
    EMAIL_CHANGE = "email_change"
    RESET = "reset"
    MFA = "mfa"  # not emailed: the pending second step of a sign-in (contract 19)
    PASSKEY_ADD = "passkey_add"  # not emailed: the challenge of adding a passkey (contract 19)
    PASSKEY = "passkey"  # not emailed: the challenge of signing in with a passkey, or of a second step


@dataclass(frozen=True)
class Kind:
    prefix: str
    lifetime: int  # seconds
    path: str  # the page the link opens, under the auth URL


KINDS = {
    LinkKind.SIGNUP: Kind(opaque.SIGNUP_LINK, 86400, "/signup/confirm"),
    LinkKind.VERIFY: Kind(opaque.VERIFY_LINK, 86400, "/email/verify"),
    LinkKind.EMAIL_CHANGE: Kind(opaque.EMAIL_CHANGE_LINK, 86400, "/email/confirm"),
    LinkKind.RESET: Kind(opaque.RESET_LINK, 1800, "/password/reset"),
    LinkKind.MFA: Kind(opaque.MFA_TOKEN, 300, "/login/mfa"),
    LinkKind.PASSKEY_ADD: Kind(opaque.PASSKEY_CHALLENGE, 300, "/account/security"),
    LinkKind.PASSKEY: Kind(opaque.PASSKEY_CHALLENGE, 300, "/login"),
}


def issue(conn: Connection, kind: LinkKind, *, email: str, user_id: str | None, now: int,
          payload: bytes | None = None, master_keys: MasterKeys | None = None) -> str:
    """A new link token of `kind` for `email`, stored by digest, with `payload` sealed under the
    master keys when given; the token, to put in the link."""
    spec = KINDS[kind]
    token = opaque.new_secret(spec.prefix)
    token_hash = opaque.digest(token)
    sealed = master_keys.seal(payload, payload_purpose(token_hash)) if payload is not None and master_keys else None
    repo.insert_link(conn, LinkToken(token_hash=token_hash, kind=kind.value, user_id=user_id, email=email,
                                     payload_sealed=sealed, created_at=now, expires_at=now + spec.lifetime,
                                     used_at=None))
    return token


def payload_purpose(token_hash: str) -> str:
    """A link's sealed payload (a pending sign-up's name and password hash) opens only for its link."""
    return f"link payload {token_hash}"


def payload_of(found: LinkToken, master_keys: MasterKeys) -> bytes | None:
    """The link's payload, opened (MasterKeyError when no configured key opens it)."""
    if found.payload_sealed is None:
        return None
    return master_keys.open(found.payload_sealed, payload_purpose(found.token_hash))


def link(auth_url: str, kind: LinkKind, token: str) -> str:
    return f"{auth_url}{KINDS[kind].path}?{urlencode({'token': token})}"


def find(conn: Connection, kind: LinkKind, token: object, now: int) -> LinkToken | None:
    """The live link token of `kind` that `token` is, or None: malformed, unknown, of another kind,
    used, voided or expired."""
    if not isinstance(token, str) or len(token) > 200 or not opaque.has_prefix(token, KINDS[kind].prefix):
        return None
    found = repo.by_hash(conn, opaque.digest(token))
    if (found is None or not opaque.matches(token, found.token_hash) or found.kind != kind.value
            or found.used_at is not None or found.expires_at <= now):
        return None
    return found


def take(conn: Connection, kind: LinkKind, token: object, now: int) -> LinkToken | None:
    """`find`, and the token is used: a second use, even a concurrent one, finds nothing."""
    found = find(conn, kind, token, now)
    if found is None or not repo.use(conn, found.token_hash, now):
        return None
    return found


def void_older(conn: Connection, user_id: str, kind: LinkKind, now: int) -> int:
    return repo.void_unused(conn, user_id, kind.value, now)


def delete_expired(conn: Connection, now: int) -> int:
    """Links expired a day ago or more: nothing can use them, and nobody needs to see them."""
    return repo.delete_expired(conn, now - 86400)
