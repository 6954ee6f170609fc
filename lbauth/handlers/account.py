"""A user's own API (contract section 4): login with email and password."""

from __future__ import annotations

from lbauth.core import users
from lbauth.errors import ValidationFailed
from lbauth.handlers.base import BaseHandler, require


class LoginHandler(BaseHandler):
    """POST /api/auth/login {email, password} -> {token, expiresIn}: a `lba_ut_` user token."""

    async def post(self) -> None:
        email, password = require(self.json_body(), "email", "password")
        if not isinstance(email, str) or not isinstance(password, str):
            raise ValidationFailed("email and password must be strings")
        s = self.services
        session = await users.login(s.db, s.clock, s.settings.user_token_ttl, email, password)
        self.send_data({"token": session.token, "expiresIn": session.expires_in})
