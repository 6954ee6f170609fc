"""What an access token opens (spec 4.5, 4.6): the user's identity and profile."""

from __future__ import annotations

from lbauth.errors import ScopeInsufficient, TokenInvalid
from lbauth.handlers.base import BaseHandler
from lbauth.verify import TokenError, require_scopes


class AccessTokenHandler(BaseHandler):
    required_scope: str | None = None

    async def token_user(self):
        """The verified claims (no database read) and then the user they name (a cached row,
        forgotten on every process within 5 s of an edit).
        Only with a check-list that is up to date: 503 from a process cut off from its database
        for 5 s, which cannot know what was revoked meanwhile (contract section 7)."""
        scheme, token = self.authorization()
        await self.services.require_fresh_checklist()
        claims = await self.checked_access_token(token, scheme)
        if self.required_scope:
            try:
                require_scopes(claims, self.required_scope)
            except TokenError:  # only oauth2.scope.insufficient; answered in our words, naming the scope
                raise ScopeInsufficient(f"This resource needs the {self.required_scope} scope.") from None
        user = await self.services.accounts.user(claims["sub"])
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
