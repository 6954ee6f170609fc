"""Revocation (contract section 7; RFC 7009, RFC 7662).

The check-list (lbauth.verify.CheckList) holds grant ids and access-token ids whose tokens must be
refused although their signatures are good. Each entry lives until the longest-lived access token
it could cover has expired. Every process keeps the list in memory and learns new entries from the
`revocations` table by cursor, so checking a token costs two dict look-ups and no I/O.

A process that has not caught up with that table for FRESH_SECONDS cannot know what was revoked
meanwhile, so the endpoints that accept access tokens fail closed (503) until it has (contract
section 7; `ServerCheckList.fresh`).
"""

from __future__ import annotations

import base64
import binascii
import math
import time
from collections.abc import Callable
from typing import Any

from lbauth import errors
from lbauth.clock import Clock, iso
from lbauth.core.clients import outbox
from lbauth.core.crypto import opaque
from lbauth.storage import Connection
from lbauth.storage.db import Database
from lbauth.storage.records import App
from lbauth.storage.records import Revocation as StoredEntry
from lbauth.storage.repo import apps as apps_repo
from lbauth.storage.repo import codes as codes_repo
from lbauth.storage.repo import grants as grants_repo
from lbauth.storage.repo import revocations as repo
from lbauth.storage.repo import tokens as tokens_repo
from lbauth.verify import MAX_LEEWAY, CheckList, Entry, TokenError, decode_access_token

# An entry outlives the tokens it covers by the most clock leeway a verifier may allow (60 s), so
# no revoked token passes an offline check in that margin.
KEEP_PAST_EXPIRY = MAX_LEEWAY
POLL_AFTER_SECONDS = 2
FRESH_SECONDS = 5  # contract section 7: not heard from the database for this long, fail closed


class ServerCheckList(CheckList):
    """A server process's check-list, and when it last caught up with the stored one.

    Its age is measured on the machine's monotonic clock, not on the process's `Clock` (which the
    tests freeze and move to expire tokens): it is about how long the process has been cut off."""

    def __init__(self, max_age: float | None = FRESH_SECONDS) -> None:
        super().__init__()
        self.max_age = max_age  # None: never stale (a test server with its periodic jobs stopped)
        self.caught_up_at = -math.inf
        # Since when this process has been fresh without a break: what it cached before a break
        # may have missed an account change (AccountCache trusts only what is younger).
        self.fresh_since = -math.inf
        self.account_listeners: list[Callable[[StoredEntry], None]] = []

    def caught_up(self, as_of: float) -> None:
        """Everything stored before monotonic time `as_of` is known here."""
        if not self.fresh():
            self.fresh_since = as_of
        self.caught_up_at = max(self.caught_up_at, as_of)

    def account_changed(self, entry: StoredEntry) -> None:
        """A session ended or a user changed (contract 16): tell the account caches."""
        for listener in self.account_listeners:
            listener(entry)

    def fresh(self) -> bool:
        return self.max_age is None or time.monotonic() - self.caught_up_at < self.max_age


def _entry(stored: StoredEntry) -> Entry:
    return Entry(stored.id, stored.grant_id, stored.jti, stored.revoked_at, stored.expires_at)


async def refresh_checklist(db: Database, clock: Clock, checklist: CheckList) -> int:
    """Read what was added to the stored check-list since this process last looked. The read goes
    ahead of the requests waiting for a database connection: a busy process must not fall behind
    on revocations, nor look cut off (see ServerCheckList)."""
    added, started = 0, time.monotonic()
    while True:
        rows = await db.read(repo.since, checklist.cursor, int(clock.now()), first=True)
        checklist.add(_entry(r) for r in rows)
        if isinstance(checklist, ServerCheckList):
            for row in rows:
                if row.session_id or row.user_id:
                    checklist.account_changed(row)
        added += len(rows)
        if len(rows) < repo.PAGE:
            if isinstance(checklist, ServerCheckList):
                checklist.caught_up(started)
            return added


# ---- users revoking an app (contract section 7) --------------------------------------------------------

async def list_authorizations(db: Database, user_id: str) -> list[dict[str, Any]]:
    return [{"appId": g.app_id, "clientId": g.client_id, "appName": g.app_name, "scopes": list(g.scopes),
             "grantedAt": iso(g.created_at)} for g in await db.read(grants_repo.live_grants_of_user, user_id)]


async def revoke_authorization(db: Database, clock: Clock, checklist: CheckList, *, user_id: str, client_id: str,
                               access_ttl: int) -> dict[str, Any]:
    """In one transaction: the grant, its open codes (first) and refresh tokens revoked, its id on
    the check-list until its access tokens expire, the event in the webhook outbox. The order:
    docs/architecture.md, "Revocation races"."""
    now = int(clock.now())

    def work(conn: Connection) -> tuple[dict[str, Any], str]:
        app = apps_repo.by_client_id(conn, client_id) if isinstance(client_id, str) else None
        grant = grants_repo.live_grant(conn, user_id, app.id) if app is not None else None
        if app is None or grant is None:
            raise errors.AuthorizationNotFound()
        event_id = revoke_grant_in(conn, clock, app, grant.id, user_id, now, access_ttl)
        if event_id is None:
            raise errors.AuthorizationNotFound()
        repo.notify(conn)
        return {"clientId": client_id, "revokedAt": iso(now), "eventId": event_id}, grant.id
    result, grant_id = await db.transaction(work)
    await cover_racing_tokens(db, clock, checklist, grant_id, now, access_ttl)
    return result


async def revoke_reused_grant(db: Database, clock: Clock, checklist: CheckList, *, client_id: str, grant_id: str,
                              user_id: str, access_ttl: int) -> None:
    """A public client's retired refresh token came back after its grace period: someone holds a
    copy, so the whole grant is revoked as if the user had revoked it (RFC 9700 4.14.2, contract 17):
    the check-list entry, its codes and refresh tokens, the webhook event. Nothing when the grant
    is no longer live."""
    now = int(clock.now())

    def work(conn: Connection) -> bool:
        app = apps_repo.by_client_id(conn, client_id)
        if app is None or revoke_grant_in(conn, clock, app, grant_id, user_id, now, access_ttl) is None:
            return False
        repo.notify(conn)
        return True
    if await db.transaction(work):
        await cover_racing_tokens(db, clock, checklist, grant_id, now, access_ttl)


def revoke_grant_in(conn: Connection, clock: Clock, app: App, grant_id: str, user_id: str, now: int,
                    access_ttl: int) -> str | None:
    """Inside the caller's transaction (which notifies): revoke a live grant, its tokens and codes,
    and queue its `authorization.revoked` event (reason user_revoked); the event's id, or None when
    the grant was no longer live."""
    if not grants_repo.revoke_grant(conn, grant_id, now):
        return None
    suspend_grant_in(conn, clock, grant_id, now, access_ttl)
    asu = grants_repo.subject(conn, user_id, app.id)
    assert asu is not None  # a grant's subject is made with it (authorize._issue)
    return outbox.write_event(conn, app_id=app.id, asu=asu, reason=outbox.USER_REVOKED, now=now,
                              deliverable=app.webhook_url is not None)


def suspend_grant_in(conn: Connection, clock: Clock, grant_id: str, now: int, access_ttl: int) -> None:
    """Inside the caller's transaction: every code, refresh token and access token of the grant
    issued so far refused (codes first: a code redeemed meanwhile would mint a refresh token after
    the tokens' update). The grant itself is left as it is: `revoke_grant_in` revokes it, a disabled
    account keeps it (contract 16). Call cover_racing_tokens after the commit."""
    codes_repo.revoke_for_grant(conn, grant_id, now)
    tokens_repo.revoke_for_grant(conn, grant_id, now)
    repo.insert_revocation(conn, grant_id=grant_id, revoked_at=now, expires_at=now + access_ttl + KEEP_PAST_EXPIRY)
    _cover_until_now(conn, clock, grant_id, now, access_ttl)


def _cover_until_now(conn: Connection, clock: Clock, grant_id: str, revoked_at: int, access_ttl: int) -> None:
    """Inside the revoking transaction, just before its commit: if the clock has passed the
    entry's second, an entry at the current second too (see cover_racing_tokens), so that a crash
    right after the commit leaves at most the commit's own round trip uncovered."""
    latest = int(clock.now())
    if latest > revoked_at:
        repo.insert_revocation(conn, grant_id=grant_id, revoked_at=latest,
                               expires_at=latest + access_ttl + KEEP_PAST_EXPIRY)


async def cover_racing_tokens(db: Database, clock: Clock, checklist: CheckList, grant_id: str, revoked_at: int,
                              access_ttl: int) -> None:
    """After a grant's entry committed: learn it and, if the clock has moved past its second, add
    one at the current second, covering tokens minted from reads that raced the revocation
    (docs/architecture.md, "Revocation races")."""
    await refresh_checklist(db, clock, checklist)
    later = int(clock.now())
    if later > (checklist.grant_revoked_at(grant_id) or revoked_at):
        def work(conn: Connection) -> None:
            repo.insert_revocation(conn, grant_id=grant_id, revoked_at=later,
                                   expires_at=later + access_ttl + KEEP_PAST_EXPIRY)
            repo.notify(conn)
        await db.transaction(work)
        await refresh_checklist(db, clock, checklist)


# ---- RFC 7009 and RFC 7662, for clients -----------------------------------------------------------------

async def revoke_token(db: Database, clock: Clock, checklist: CheckList, keys: dict[str, Any], *, app: App,
                       token: str, issuer: str, audience: str | None, access_ttl: int) -> None:
    """RFC 7009 2.1. A refresh token is revoked with every access token of its grant issued so far
    (2.1: "SHOULD also invalidate all access tokens based on the same authorization grant"); an
    access token, by its jti. Unknown or expired tokens are not an error (2.2)."""
    now = int(clock.now())

    def work(conn: Connection) -> str | bool:
        if opaque.has_prefix(token, opaque.REFRESH_TOKEN):
            row = tokens_repo.by_hash(conn, opaque.digest(token))
            if row is None or row.app_id != app.id or row.revoked_at is not None:
                return False
            tokens_repo.revoke_one(conn, row.token_hash, now)
            repo.insert_revocation(conn, grant_id=row.grant_id, revoked_at=now,
                                   expires_at=now + access_ttl + KEEP_PAST_EXPIRY)
            _cover_until_now(conn, clock, row.grant_id, now, access_ttl)
            repo.notify(conn)
            return row.grant_id
        claims = _claims(token, keys, issuer, audience, now)
        if claims is None or claims["client_id"] != app.client_id:
            return False
        repo.insert_revocation(conn, jti=claims["jti"], revoked_at=now,
                               expires_at=int(claims["exp"]) + KEEP_PAST_EXPIRY)
        repo.notify(conn)
        return True
    revoked = await db.transaction(work)
    if isinstance(revoked, str):  # a refresh token: its grant's entry
        await cover_racing_tokens(db, clock, checklist, revoked, now, access_ttl)
    elif revoked:
        await refresh_checklist(db, clock, checklist)


def _claims(token: str, keys: dict[str, Any], issuer: str, audience: str | None, now: int) -> dict[str, Any] | None:
    try:
        return decode_access_token(token, keys, issuer=issuer, audience=audience, now=now, leeway=0)
    except TokenError:
        return None


async def introspect(db: Database, clock: Clock, keys: dict[str, Any], *, app: App, token: str, issuer: str,
                     audience: str | None) -> dict[str, Any]:
    """RFC 7662 2.2. Reads the database, so a revocation made by any process shows at once. A
    client learns only about its own tokens: anything else is {"active": false}."""
    now = int(clock.now())
    inactive = {"active": False}
    if opaque.has_prefix(token, opaque.REFRESH_TOKEN):
        row = await db.read(tokens_repo.by_hash, opaque.digest(token))
        if row is None or row.app_id != app.id or row.revoked_at is not None or row.expires_at <= now:
            return inactive
        # No token_type: RFC 7662 2.2 names access-token types there (contract 7).
        return {"active": True, "client_id": app.client_id, "sub": row.user_id,
                "scope": " ".join(row.scopes), "iat": row.created_at, "exp": row.expires_at, "iss": issuer}
    claims = _claims(token, keys, issuer, audience, now)
    if claims is None or claims["client_id"] != app.client_id:
        return inactive
    if await db.read(repo.covers, claims.get("gid"), claims["jti"], int(claims["iat"]), now):
        return inactive
    return {"active": True, "token_type": "Bearer", **{k: claims[k] for k in (
        "scope", "client_id", "sub", "iat", "exp", "iss", "aud", "jti") if k in claims}}


# ---- the feed for offline verifiers -----------------------------------------------------------------------

def encode_cursor(value: int) -> str:
    return base64.urlsafe_b64encode(f"rv1:{value}".encode()).rstrip(b"=").decode()


def decode_cursor(cursor: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        prefix, value = raw.split(":", 1)
        if prefix != "rv1" or not value.isdigit():
            raise ValueError
        return int(value)
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise errors.ValidationFailed("since must be a cursor returned by this endpoint") from None


async def feed(db: Database, clock: Clock, since: str | None) -> dict[str, Any]:
    """GET /api/oauth/revocations: live entries after the cursor (all of them without one)."""
    after = decode_cursor(since) if since else 0
    rows = await db.read(repo.since, after, int(clock.now()), published=True)
    items = [{("grantId" if row.grant_id else "jti"): row.grant_id or row.jti, "revokedAt": iso(row.revoked_at),
              "expiresAt": iso(row.expires_at)} for row in rows]
    last = rows[-1].id if rows else after
    return {"items": items, "cursor": encode_cursor(last), "pollAfter": 0 if len(rows) == repo.PAGE
            else POLL_AFTER_SECONDS}
