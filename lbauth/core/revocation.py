"""Revocation (contract section 7; RFC 7009, RFC 7662).

The check-list (lbauth.verify.CheckList) holds grant ids and access-token ids whose tokens must be
refused although their signatures are good. Each entry lives until the longest-lived access token
it could cover has expired. Every process keeps the list in memory and learns new entries from the
`revocations` table by cursor, so checking a token costs two dict look-ups and no I/O.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from sqlalchemy import Connection, Row, text

from lbauth import errors
from lbauth.clock import Clock, iso
from lbauth.core import opaque, outbox
from lbauth.storage.db import Database
from lbauth.storage.repo import apps as apps_repo
from lbauth.storage.repo import codes as codes_repo
from lbauth.storage.repo import grants as grants_repo
from lbauth.storage.repo import revocations as repo
from lbauth.storage.repo import tokens as tokens_repo
from lbauth.verify import MAX_LEEWAY, CheckList, Entry, TokenError, decode_access_token

NOTIFY_CHANNEL = "lbauth_revocations"
# An entry outlives the tokens it covers by the most clock leeway a verifier may allow (60 s), so
# no revoked token passes an offline check in that margin.
KEEP_PAST_EXPIRY = MAX_LEEWAY
POLL_AFTER_SECONDS = 2


def _entry(row: Row) -> Entry:
    return Entry(row.id, row.grant_id, row.jti, row.revoked_at, row.expires_at)


async def refresh_checklist(db: Database, clock: Clock, checklist: CheckList) -> int:
    """Read what was added to the stored check-list since this process last looked."""
    added = 0
    while True:
        rows = await db.read(repo.since, checklist.cursor, int(clock.now()))
        checklist.add(_entry(r) for r in rows)
        added += len(rows)
        if len(rows) < repo.PAGE:
            return added


def notify(conn: Connection) -> None:
    """Wake every process's listener when this transaction commits (PostgreSQL LISTEN/NOTIFY)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_notify(:channel, '')"), {"channel": NOTIFY_CHANNEL})


# ---- users revoking an app (contract section 7) --------------------------------------------------------

async def list_authorizations(db: Database, user_id: str) -> list[dict]:
    return [{"appId": row.app_id, "clientId": row.client_id, "appName": row.app_name, "scopes": list(row.scopes),
             "grantedAt": iso(row.created_at)} for row in await db.read(grants_repo.live_grants_of_user, user_id)]


async def revoke_authorization(db: Database, clock: Clock, checklist: CheckList, *, user_id: str, client_id: str,
                               access_ttl: int) -> dict:
    """In one transaction: the grant, its refresh tokens and open codes revoked, its id on the
    check-list until every access token it issued has expired, the event in the webhook outbox.

    The codes go first: on PostgreSQL (read committed) each statement sees what committed before
    it, and an exchange that claimed a code just before would otherwise store its refresh token
    after the refresh tokens were revoked: a live refresh token under a revoked grant (the crash
    test found it). Revoking the open codes locks them, so an exchange under way finishes first and
    its refresh token is then revoked with the others, and a later one claims nothing."""
    now = int(clock.now())

    def work(conn: Connection) -> tuple[dict, str]:
        app = apps_repo.by_client_id(conn, client_id) if isinstance(client_id, str) else None
        grant = grants_repo.live_grant(conn, user_id, app.id) if app is not None else None
        if grant is None or not grants_repo.revoke_grant(conn, grant.id, now):
            raise errors.AuthorizationNotFound()
        codes_repo.revoke_for_grant(conn, grant.id, now)
        tokens_repo.revoke_for_grant(conn, grant.id, now)
        repo.insert_revocation(conn, grant_id=grant.id, revoked_at=now, expires_at=now + access_ttl + KEEP_PAST_EXPIRY)
        event_id = outbox.write_event(conn, app_id=app.id, asu=grant.asu, reason=outbox.USER_REVOKED, now=now,
                                      deliverable=app.webhook_url is not None)
        _cover_until_now(conn, clock, grant.id, now, access_ttl)
        notify(conn)
        return {"clientId": client_id, "revokedAt": iso(now), "eventId": event_id}, grant.id
    result, grant_id = await db.transaction(work)
    await cover_racing_tokens(db, clock, checklist, grant_id, now, access_ttl)
    return result


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
    """After a grant's entry committed: learn it, and, when the clock has passed the entry's
    second since, add one at the current second. A token is stamped with the time its request
    started (tokens.py), before the database read that found its code or refresh token live; a read
    that raced this revocation started before the commit, so its tokens are covered by this entry
    too, even if they were minted, here or in another process, seconds later."""
    await refresh_checklist(db, clock, checklist)
    later = int(clock.now())
    if later > (checklist.grant_revoked_at(grant_id) or revoked_at):
        def work(conn: Connection) -> None:
            repo.insert_revocation(conn, grant_id=grant_id, revoked_at=later,
                                   expires_at=later + access_ttl + KEEP_PAST_EXPIRY)
            notify(conn)
        await db.transaction(work)
        await refresh_checklist(db, clock, checklist)


# ---- RFC 7009 and RFC 7662, for clients -----------------------------------------------------------------

async def revoke_token(db: Database, clock: Clock, checklist: CheckList, keys: dict, *, app: Row, token: str,
                       issuer: str, audience: str, access_ttl: int) -> None:
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
            notify(conn)
            return row.grant_id
        claims = _claims(token, keys, issuer, audience, now)
        if claims is None or claims["client_id"] != app.client_id:
            return False
        repo.insert_revocation(conn, jti=claims["jti"], revoked_at=now,
                               expires_at=int(claims["exp"]) + KEEP_PAST_EXPIRY)
        notify(conn)
        return True
    revoked = await db.transaction(work)
    if isinstance(revoked, str):  # a refresh token: its grant's entry
        await cover_racing_tokens(db, clock, checklist, revoked, now, access_ttl)
    elif revoked:
        await refresh_checklist(db, clock, checklist)


def _claims(token: str, keys: dict, issuer: str, audience: str, now: int) -> dict[str, Any] | None:
    try:
        return decode_access_token(token, keys, issuer=issuer, audience=audience, now=now, leeway=0)
    except TokenError:
        return None


async def introspect(db: Database, clock: Clock, keys: dict, *, app: Row, token: str, issuer: str,
                     audience: str) -> dict[str, Any]:
    """RFC 7662 2.2. Reads the database, so a revocation made by any process shows at once. A
    client learns only about its own tokens: anything else is {"active": false}."""
    now = int(clock.now())
    inactive = {"active": False}
    if opaque.has_prefix(token, opaque.REFRESH_TOKEN):
        row = await db.read(tokens_repo.by_hash, opaque.digest(token))
        if row is None or row.app_id != app.id or row.revoked_at is not None or row.expires_at <= now:
            return inactive
        return {"active": True, "token_type": "refresh_token", "client_id": app.client_id, "sub": row.user_id,
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
    rows = await db.read(repo.since, after, int(clock.now()))
    items = [{("grantId" if row.grant_id else "jti"): row.grant_id or row.jti, "revokedAt": iso(row.revoked_at),
              "expiresAt": iso(row.expires_at)} for row in rows]
    last = rows[-1].id if rows else after
    return {"items": items, "cursor": encode_cursor(last), "pollAfter": 0 if len(rows) == repo.PAGE
            else POLL_AFTER_SECONDS}
