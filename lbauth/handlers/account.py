"""A user's own API (contract sections 4 and 7): login, and the apps they have authorized."""

from __future__ import annotations

from lbauth.core import revocation, users
from lbauth.errors import ValidationFailed
from lbauth.handlers.base import BaseHandler, require


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
        self.send_data({"items": await revocation.list_authorizations(self.services.db, user.id)})


class AuthorizationHandler(UserTokenHandler):
    """DELETE /api/auth/authorizations/{clientId}: revoke the user's grant to that app."""

    async def delete(self, client_id: str) -> None:
        user = await self.bearer_user()
        s = self.services
        result = await revocation.revoke_authorization(s.db, s.clock, s.checklist, user_id=user.id,
                                                       client_id=client_id,
                                                       access_ttl=s.settings.access_token_ttl)
        self.send_data(result)


class RevocationFeedHandler(BaseHandler):
    """GET /api/oauth/revocations[?since=CURSOR]: the check-list for offline verifiers. It names
    only random grant and token ids, so it needs no credentials; responses carry an ETag."""

    def set_default_headers(self) -> None:
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Cache-Control", "no-cache")

    async def get(self) -> None:
        since = self.get_query_argument("since", None)
        self.send_data(await revocation.feed(self.services.db, self.services.clock, since))
