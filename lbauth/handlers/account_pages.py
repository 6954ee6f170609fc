"""{auth_url}/account/apps: "Connected apps" (contract section 7). Each app the user authorized,
its scopes and when; revoking asks for confirmation first (a second page, no JavaScript)."""

from __future__ import annotations

from lbauth.core import revocation, scopes
from lbauth.errors import AuthorizationNotFound
from lbauth.handlers.pages import PageHandler


class ConnectedAppsPage(PageHandler):
    async def get(self) -> None:
        if self.user is None:
            self.login_form(self.request.uri)
            return
        items = await revocation.list_authorizations(self.services.db, self.user.id)
        self.render_page("connected_apps.html", items=items, meanings=scopes.SCOPES,
                         revoked=self.get_query_argument("revoked", None))


class RevokeAppPage(PageHandler):
    """GET: "Revoke access for X?" POST (with XSRF): revoke, then back to the list."""

    async def get(self, client_id: str) -> None:
        if self.user is None:
            self.login_form(self.request.uri)
            return
        items = await revocation.list_authorizations(self.services.db, self.user.id)
        item = next((i for i in items if i["clientId"] == client_id), None)
        if item is None:
            raise AuthorizationNotFound()
        self.render_page("confirm_revoke.html", item=item, meanings=scopes.SCOPES)

    async def post(self, client_id: str) -> None:
        self.form()
        if self.user is None:
            self.login_form("/account/apps", status=401)
            return
        s = self.services
        await revocation.revoke_authorization(s.db, s.clock, s.checklist, user_id=self.user.id, client_id=client_id,
                                              access_ttl=s.settings.access_token_ttl)
        self.redirect(f"/account/apps?revoked={client_id}", status=303)
