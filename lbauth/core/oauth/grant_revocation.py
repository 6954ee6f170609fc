"""Revoking a grant (contract sections 7, 16 and 17): its codes, refresh tokens and access tokens
refused, and the app told by its webhook. The user's own revocation is in `authorizations`; an
account disabled or deleted, an app deleted and a reused refresh token come here too."""

from __future__ import annotations

from lbauth.clock import Clock
from lbauth.core import audit
from lbauth.core.clients import outbox
from lbauth.core.oauth.checklist import CheckList, cover_racing_tokens, cover_until_now, enter_grant
from lbauth.storage import Connection
from lbauth.storage.db import Database
from lbauth.storage.records import App
from lbauth.storage.repo import apps as apps_repo
from lbauth.storage.repo import changes as changes_repo
from lbauth.storage.repo import codes as codes_repo
from lbauth.storage.repo import device as device_repo
from lbauth.storage.repo import grants as grants_repo
from lbauth.storage.repo import tokens as tokens_repo


def suspend_grant_in(conn: Connection, clock: Clock, grant_id: str, now: int, access_ttl: int) -> None:
    """Inside the caller's transaction: every code, device code, refresh token and access token of
    the grant issued so far refused (codes first: a code redeemed meanwhile would mint a refresh
    token after the tokens' update). The grant itself is left as it is: `revoke_grant_in` revokes
    it, a disabled account keeps it (contract 16). Call cover_racing_tokens after the commit."""
    codes_repo.revoke_for_grant(conn, grant_id, now)
    device_repo.deny_for_grant(conn, grant_id, now)  # approved for a device (RFC 8628) that has not polled yet
    tokens_repo.revoke_for_grant(conn, grant_id, now)
    enter_grant(conn, grant_id, now, access_ttl)
    cover_until_now(conn, clock, grant_id, now, access_ttl)


def revoke_grant_in(conn: Connection, clock: Clock, app: App, grant_id: str, user_id: str, now: int,
                    access_ttl: int) -> str | None:
    """Inside the caller's transaction (which notifies): revoke a live grant, its tokens and codes,
    and queue its `authorization.revoked` event (reason user_revoked); the event's id, or None when
    the grant was no longer live."""
    if not grants_repo.revoke_grant(conn, grant_id, now):
        return None
    suspend_grant_in(conn, clock, grant_id, now, access_ttl)
    asu = grants_repo.subject(conn, user_id, app.id)
    assert asu is not None  # a grant's subject is made with it (authorization/codes.py)
    return outbox.write_event(conn, app_id=app.id, asu=asu, reason=outbox.USER_REVOKED, now=now,
                              deliverable=app.webhook_url is not None)


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
        audit.record(conn, now, audit.EventType.AUTHORIZATION_REVOKED, audit.SYSTEM, user_id=user_id,
                     detail={"clientId": app.client_id, "app": app.name, "reason": "reuse"})
        changes_repo.notify(conn)
        return True
    if await db.transaction(work):
        await cover_racing_tokens(db, clock, checklist, grant_id, now, access_ttl)
