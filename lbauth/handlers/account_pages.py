"""{auth_url}/account/apps: "Connected apps" (contract section 7). Each app the user authorized,
its scopes and when; revoking asks for confirmation first (a second page, no JavaScript)."""

from __future__ import annotations

from typing import Any

from lbauth.core import scopes
from lbauth.errors import AuthorizationNotFound
from lbauth.handlers.pages import PageHandler, signed_in


class ConnectedAppsPage(PageHandler):
    @signed_in
    async def get(self) -> None:
        items = await self.services.oauth.authorizations(self.user.id)
        self.render_page("connected_apps.html", items=items, meanings=scopes.SCOPES,
                         revoked=self.get_query_argument("revoked", None))


class RevokeAppPage(PageHandler):
    """GET: "Revoke access for X?" POST (with XSRF): revoke, then back to the list."""

    @signed_in
    async def get(self, client_id: str) -> None:
        items = await self.services.oauth.authorizations(self.user.id)
        item = next((i for i in items if i["clientId"] == client_id), None)
        if item is None:
            raise AuthorizationNotFound()
        self.render_page("confirm_revoke.html", item=item, meanings=scopes.SCOPES)

    @signed_in(next_url="/account/apps", status=401)
    async def post(self, client_id: str, form: dict[str, Any]) -> None:
        await self.services.oauth.revoke_authorization(self.user.id, client_id)
        self.redirect(f"/account/apps?revoked={client_id}", status=303)
