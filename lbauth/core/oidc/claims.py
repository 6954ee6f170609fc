"""Claims by scope (OpenID Connect Core 5.4; contract 15): what UserInfo returns. `sub` is the
pairwise appScopedUserId, equal to the ID token's, never the userId."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from lbauth.storage.records import User

# contract 15: the specification's `userinfo` scope opens the profile and the email too
_PROFILE_SCOPES, _EMAIL_SCOPES = {"profile", "userinfo"}, {"email", "userinfo"}
SUPPORTED = ["sub", "iss", "aud", "exp", "iat", "auth_time", "nonce", "at_hash", "sid", "amr", "acr", "name", "picture",
             "email", "email_verified"]


def userinfo(user: User, asu: str, scopes: Collection[str]) -> dict[str, Any]:
    document: dict[str, Any] = {"sub": asu}
    if _PROFILE_SCOPES.intersection(scopes):
        document["name"] = user.name
        if user.avatar:
            document["picture"] = user.avatar
    if _EMAIL_SCOPES.intersection(scopes):
        document["email"] = user.email
        document["email_verified"] = bool(user.email_verified)
    return document
