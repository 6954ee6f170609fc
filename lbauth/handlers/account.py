"""A user's own API (contract sections 4 and 7): login, and the apps they have authorized."""

from __future__ import annotations

from lbauth.core.accounts import users
from lbauth.core.fields import require
from lbauth.core.oauth import revocation
from lbauth.errors import ValidationFailed
from lbauth.handlers.base import BaseHandler, CorsHandler


class LoginHandler(BaseHandler):
    """POST /api/auth/login {email, password} -> {token, expiresIn}: a `lba_ut_` user token."""

    async def post(self) -> None:
        email, password = require(self.json_body(), "email", "password")
        if not isinstance(email, str) or not isinstance(password, str):
            raise ValidationFailed("email and password must be strings")
        self.limit_login(email)
        s = self.services
        session = await users.login(s.db, s.clock, s.settings.user_token_ttl, email, password)
        self.send_data({"token": session.token, "expiresIn": session.expires_in})


class UserTokenHandler(BaseHandler):
    async def bearer_user(self):
        return await users.user_for_token(self.services.db, self.services.clock, self.bearer_token())


class AuthorizationsHandler(UserTokenHandler):
    """GET /api/auth/authorizations: the user's live grants."""

    async def get(self) -> None:
        user = await self.bearer_user()
        self.send_data({"items": await self.services.oauth.authorizations(user.id)})


class AuthorizationHandler(UserTokenHandler):
    """DELETE /api/auth/authorizations/{clientId}: revoke the user's grant to that app."""

    async def delete(self, client_id: str) -> None:
        user = await self.bearer_user()
        self.send_data(await self.services.oauth.revoke_authorization(user.id, client_id))


class RevocationFeedHandler(CorsHandler):
    """GET /api/oauth/revocations[?since=CURSOR]: the check-list for offline verifiers. It names
    only random grant and token ids, so it needs no credentials, and browsers of any origin may
    read it (contract 11); responses carry an ETag."""

    def set_default_headers(self) -> None:
        super().set_default_headers()
        self.set_header("Cache-Control", "no-cache")

    async def get(self) -> None:
        since = self.get_query_argument("since", None)
        self.send_data(await revocation.feed(self.services.db, self.services.clock, since))
