"""RP-initiated logout (OpenID Connect RP-Initiated Logout 1.0; contract 15): what a request to
{auth_url}/oauth/logout may do. The page handler ends the browser session; this decides whether to
ask first and where the user goes afterwards.

- `id_token_hint`: an ID token this server issued (signature and `iss` checked, expiry ignored);
  a bad one is refused (an error page, 400, no redirect).
- `client_id` and the hint's `aud` must agree, or the request is refused the same way.
- The user goes back to `post_logout_redirect_uri` (with `state` when sent) only when the app is
  known (by `client_id` or the hint's `aud`) and registered that URI exactly; otherwise the page
  says the user is signed out.
- The user is asked first unless the hint's `sid` names the very browser session being ended.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lbauth import errors
from lbauth.core.fields import one
from lbauth.core.oidc.id_tokens import read_hint
from lbauth.core.urls import with_query
from lbauth.storage.db import Database
from lbauth.storage.records import App
from lbauth.storage.repo import apps as apps_repo

PARAMETERS = ("id_token_hint", "client_id", "post_logout_redirect_uri", "state", "logout_hint", "ui_locales")
MAX_PARAMETER_LENGTH = 8192  # an ID token is well under this; anything longer is not one


@dataclass(frozen=True)
class Logout:
    """The outcome of a logout request, before the session is ended."""
    app: App | None  # the relying party, when known
    redirect_uri: str | None  # the registered post-logout URI the user goes back to, when allowed
    state: str | None
    hint_sid: str | None  # the `sid` of a valid id_token_hint

    @property
    def target(self) -> str | None:
        """Where the user goes after the session ends: the post-logout URI with `state` (RFC 6749
        3.1.2: a query the URI already has is kept), or None for the signed-out page."""
        if self.redirect_uri is None:
            return None
        if self.state is None:
            return self.redirect_uri
        return with_query(self.redirect_uri, {"state": self.state})

    def asks_first(self, session_id: str | None) -> bool:
        """A signed-in user is asked before the session ends, unless the hint names that session."""
        return session_id is not None and self.hint_sid != session_id


def _parameter(params: Mapping[str, Sequence[str]], name: str) -> str | None:
    """A logout parameter: sent at most once, of bounded length and with no NUL; empty is absent."""
    if len(params.get(name, [])) > 1:
        raise errors.ValidationFailed(f"{name} must be sent at most once")
    value = one(params, name)
    if value is not None and (len(value) > MAX_PARAMETER_LENGTH or "\x00" in value):
        raise errors.ValidationFailed(f"{name} is not valid")
    return value or None


def _audience(claims: dict[str, Any]) -> str | None:
    """The one client an ID token was issued to (lbauth's carry one audience)."""
    audience = claims["aud"]
    if isinstance(audience, list):
        return audience[0] if len(audience) == 1 and isinstance(audience[0], str) else None
    return audience if isinstance(audience, str) else None


async def check(db: Database, public_keys: dict[str, tuple[str, Any]], issuer: str,
                params: Mapping[str, Sequence[str]]) -> Logout:
    """The logout request's outcome; ValidationFailed (an error page, never a redirect) for a bad
    id_token_hint or a client_id that is not the hint's audience."""
    for name in PARAMETERS:
        _parameter(params, name)  # each at most once, logout_hint and ui_locales included (then ignored)
    hint, client_id = _parameter(params, "id_token_hint"), _parameter(params, "client_id")
    uri, state = _parameter(params, "post_logout_redirect_uri"), _parameter(params, "state")
    hint_sid = None
    if hint is not None:
        claims = read_hint(hint, public_keys, issuer)
        audience = _audience(claims)
        if client_id is not None and audience != client_id:
            raise errors.ValidationFailed("client_id is not the client the id_token_hint was issued to.")
        client_id = client_id or audience
        sid = claims.get("sid")
        hint_sid = sid if isinstance(sid, str) else None
    app = await db.read(apps_repo.by_client_id, client_id) if client_id is not None else None
    allowed = app is not None and uri is not None and uri in app.post_logout_redirect_uris
    return Logout(app=app, redirect_uri=uri if allowed else None, state=state, hint_sid=hint_sid)
