"""What an access token opens (spec 4.5, 4.6): the user's identity and profile."""

from __future__ import annotations

from lbauth.errors import ScopeInsufficient, TokenInvalid
from lbauth.handlers.base import BaseHandler


class AccessTokenHandler(BaseHandler):
    required_scope: str | None = None

    async def token_user(self):
        """The verified claims (no database read) and then the user they name (a cached row)."""
        claims = self.services.tokens.check(self.bearer_token())
        if self.required_scope and self.required_scope not in claims["scope"].split():
            raise ScopeInsufficient(f"This resource needs the {self.required_scope} scope.")
        user = await self.services.profiles.by_id(claims["sub"])
        if user is None:
            raise TokenInvalid()
        return claims, user


class MeHandler(AccessTokenHandler):
    """GET /api/auth/me: the authenticated user and their id for this app (spec 2)."""

    async def get(self) -> None:
        claims, user = await self.token_user()
        self.send_data({"userId": user.id, "name": user.name, "email": user.email, "avatar": user.avatar,
                        "bio": user.bio, "appScopedUserId": claims["asu"]})


class UserInfoHandler(AccessTokenHandler):
    """GET /api/service/user/info: the profile, for tokens with the `userinfo` scope (contract 5)."""

    required_scope = "userinfo"

    async def get(self) -> None:
        _, user = await self.token_user()
        self.send_data({"userId": user.id, "name": user.name, "email": user.email, "avatar": user.avatar,
                        "bio": user.bio, "interestTags": list(user.interest_tags)})
