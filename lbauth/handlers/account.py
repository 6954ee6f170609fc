"""A user's own API (contract sections 4, 7 and 16): signing in and out, sessions, the profile,
the password, leaving, and the apps they have authorized. Every endpoint but login takes a user
token (`Authorization: Bearer lba_ut_...`)."""

from __future__ import annotations

from typing import Any

from lbauth.clock import iso
from lbauth.core.accounts.accounts import ProfileChanges, SecondStepNeeded
from lbauth.core.accounts.sessions import API, SignedIn
from lbauth.core.audit.log import page_size
from lbauth.core.fields import require
from lbauth.core.oauth.authorizations import Authorization
from lbauth.errors import MfaEnrolmentRequired, ValidationFailed
from lbauth.handlers.account_json import (
    account_deleted_json,
    audit_event_json,
    ended_session_json,
    listed_session_json,
    profile_json,
)
from lbauth.handlers.base import BaseHandler, CorsHandler
from lbauth.storage.records import Change

# PATCH /api/account/profile's fields (contract 16) -> the core's names for them.
PROFILE_FIELDS = {"name": "name", "avatar": "avatar", "bio": "bio", "interestTags": "interest_tags"}


class LoginHandler(BaseHandler):
    """POST /api/auth/login {email, password} -> {token, expiresIn}: a `lba_ut_` user token, an
    `api` session (contract 16); for a user with a second factor {mfaRequired, mfaToken, methods}
    instead (contract 19), to finish at POST /api/auth/login/mfa."""

    async def post(self) -> None:
        email, password = strings(self.json_body(), "email", "password")
        self.limit_login(email)
        result = await self.services.accounts.sign_in(email, password, kind=API, source=self.source())
        if isinstance(result, SecondStepNeeded):
            self.send_data({"mfaRequired": True, "mfaToken": result.mfa_token, "methods": result.methods})
        else:
            self.send_data({"token": result.token, "expiresIn": result.expires_in})


class UserTokenHandler(BaseHandler):
    # LBAUTH_MFA=required: may a user without a second factor call this? Only what enrols one.
    open_before_enrolment = False

    async def signed_in(self) -> SignedIn:
        me = await self.services.accounts.sessions.check(self.bearer_token())
        if (self.services.settings.mfa == "required" and not me.user.mfa
                and not type(self).open_before_enrolment):
            raise MfaEnrolmentRequired()
        return me


class LogoutHandler(UserTokenHandler):
    """POST /api/auth/logout: end the calling token's session."""
    open_before_enrolment = True

    async def post(self) -> None:
        self.send_data(ended_session_json(await self.services.accounts.sign_out(await self.signed_in(), self.source())))


class SessionsHandler(UserTokenHandler):
    """GET /api/account/sessions: the user's live sessions, the calling one marked `current`."""

    async def get(self) -> None:
        me = await self.signed_in()
        listed = await self.services.accounts.sessions.listed(me.user.id, me.session.id)
        self.send_data({"items": [listed_session_json(item) for item in listed]})


class SessionHandler(UserTokenHandler):
    """DELETE /api/account/sessions/{sessionId}: end one of the user's sessions."""

    async def delete(self, session_id: str) -> None:
        me = await self.signed_in()
        self.send_data(ended_session_json(await self.services.accounts.sessions.end(
            me.user.id, session_id, source=self.source(), own=session_id == me.session.id)))


class EndOtherSessionsHandler(UserTokenHandler):
    """POST /api/account/sessions/end-others: end every session of the user but the calling one."""

    async def post(self) -> None:
        me = await self.signed_in()
        self.send_data({"ended": await self.services.accounts.sessions.end_others(me.user.id, me.session.id,
                                                                                  source=self.source())})


class ActivityHandler(UserTokenHandler):
    """GET /api/account/activity[?cursor=...&limit=N]: the user's own audit events (contract 21),
    newest first, `limit` at a time (20 unless said, at most 100); `nextCursor` asks for the page
    after, and is null on the last."""

    async def get(self) -> None:
        me = await self.signed_in()
        limit = page_size(self.get_query_argument("limit", None))
        page = await self.services.audit.activity(me.user.id, self.get_query_argument("cursor", None), limit)
        self.send_data({"items": [audit_event_json(event) for event in page.events], "nextCursor": page.next_cursor})


class ProfileHandler(UserTokenHandler):
    """GET and PATCH /api/account/profile (name, avatar, bio, interestTags)."""

    async def get(self) -> None:
        self.send_data(profile_json((await self.signed_in()).user))

    async def patch(self) -> None:
        me = await self.signed_in()
        changes = profile_changes(self.json_body())
        self.send_data(profile_json(await self.services.accounts.update_profile(me.user, changes)))


class PasswordHandler(UserTokenHandler):
    """POST /api/account/password {currentPassword, newPassword}: every other session ends."""

    async def post(self) -> None:
        me = await self.signed_in()
        current, new = strings(self.json_body(), "currentPassword", "newPassword")
        self.limit_login(me.user.email)
        ended = await self.services.accounts.change_password(me, current, new, self.source())
        self.send_data({"endedSessions": ended})


class AccountHandler(UserTokenHandler):
    """DELETE /api/account {password}: leave (contract 16)."""
    open_before_enrolment = True

    async def delete(self) -> None:
        me = await self.signed_in()
        (password,) = strings(self.json_body(), "password")
        self.limit_login(me.user.email)
        self.send_data(account_deleted_json(await self.services.accounts.delete_own(me, password)))


class AuthorizationsHandler(UserTokenHandler):
    """GET /api/auth/authorizations: the user's live grants."""

    async def get(self) -> None:
        me = await self.signed_in()
        items = await self.services.oauth.authorizations(me.user.id)
        self.send_data({"items": [authorization_json(item) for item in items]})


class AuthorizationHandler(UserTokenHandler):
    """DELETE /api/auth/authorizations/{clientId}: revoke the user's grant to that app."""

    async def delete(self, client_id: str) -> None:
        me = await self.signed_in()
        revoked = await self.services.oauth.revoke_authorization(me.user.id, client_id, self.source())
        self.send_data({"clientId": revoked.client_id, "revokedAt": iso(revoked.revoked_at),
                        "eventId": revoked.event_id})


class RevocationFeedHandler(CorsHandler):
    """GET /api/oauth/revocations[?since=CURSOR]: the check-list for offline verifiers. It names
    only random grant and token ids, so it needs no credentials, and browsers of any origin may
    read it (contract 11); responses carry an ETag."""

    def set_default_headers(self) -> None:
        super().set_default_headers()
        self.set_header("Cache-Control", "no-cache")

    async def get(self) -> None:
        since = self.get_query_argument("since", None)
        page = await self.services.oauth.revocations_since(since)
        self.send_data({"items": [revocation_json(change) for change in page.entries], "cursor": page.cursor,
                        "pollAfter": page.poll_after})


def authorization_json(authorization: Authorization) -> dict[str, Any]:
    """An item of GET /api/auth/authorizations (contract 7)."""
    return {"appId": authorization.app_id, "clientId": authorization.client_id, "appName": authorization.app_name,
            "scopes": list(authorization.scopes), "grantedAt": iso(authorization.granted_at)}


def revocation_json(change: Change) -> dict[str, Any]:
    """An item of the revocation feed (contract 7): a revoked grant or access token."""
    return {("grantId" if change.grant_id else "jti"): change.grant_id or change.jti,
            "revokedAt": iso(change.changed_at), "expiresAt": iso(change.expires_at)}


def strings(body: Any, *names: str) -> list[str]:
    """Required string fields of a JSON body."""
    values = require(body, *names)
    if not all(isinstance(v, str) for v in values):
        raise ValidationFailed(f"{' and '.join(names)} must be {'strings' if len(names) > 1 else 'a string'}")
    return values


def profile_changes(body: dict[str, Any]) -> ProfileChanges:
    """The profile fields a PATCH sends, by the core's names; any other field is refused."""
    unknown = sorted(set(body) - set(PROFILE_FIELDS))
    if unknown:
        raise ValidationFailed(f"{unknown[0][:40]} cannot be changed here; editable: "
                               f"{', '.join(sorted(PROFILE_FIELDS))}", field=unknown[0][:40])
    return ProfileChanges(**{PROFILE_FIELDS[name]: value for name, value in body.items()})
