"""GET/POST {auth_url}/oauth/logout: RP-initiated logout (OpenID Connect RP-Initiated Logout 1.0;
contract 15). The relying party's request (GET, or a form POST) carries no XSRF token; the
confirmation form, lbauth's own, does. What the request may do is decided in core/oidc/logout."""

from __future__ import annotations

from lbauth.core import urls
from lbauth.core.oidc import logout
from lbauth.handlers.pages import SESSION_COOKIE, PageHandler

_CONFIRM = "confirm"  # the confirmation form's field: present only in lbauth's own form


class LogoutEndpoint(PageHandler):
    open_before_enrolment = True  # LBAUTH_MFA=required: see PageHandler

    async def get(self) -> None:
        params = self.query_lists()
        await self.handle(params, status=302)

    async def post(self) -> None:
        posted = self.form_body()
        if _CONFIRM not in posted:  # the relying party's form POST: no XSRF token (contract 5)
            await self.handle({name: [value] for name, value in posted.items()}, status=303)
            return
        form = self.form()  # the confirmation: its XSRF token checked
        params = {name: [form[name]] for name in ("client_id", "post_logout_redirect_uri", "state") if name in form}
        outcome = await self.check(params)
        await self.end_session()
        self.finish_logout(outcome, status=303, our_form=True)

    async def check(self, params: dict[str, list[str]]) -> logout.Logout:
        return await self.services.oauth.end_session_request(params)

    async def handle(self, params: dict[str, list[str]], status: int) -> None:
        outcome = await self.check(params)
        if outcome.asks_first(self.session.session.id if self.session is not None else None):
            if outcome.redirect_uri is not None:
                self.allow_form_to(outcome.redirect_uri)  # the confirmation ends at the client (contract 5)
            self.render_page("logout_confirm.html", app=outcome.app, client_id=outcome.app.client_id
                             if outcome.app is not None else None, redirect_uri=outcome.redirect_uri,
                             state=outcome.state)
            return
        await self.end_session()
        self.finish_logout(outcome, status)

    async def end_session(self) -> None:
        if self.session is not None:
            await self.services.accounts.sign_out(self.session, self.source())
            self.session, self.user = None, None
        self.clear_cookie(SESSION_COOKIE)

    def finish_logout(self, outcome: logout.Logout, status: int, our_form: bool = False) -> None:
        target = outcome.target
        if target is None:
            self.render_page("signed_out.html", app=outcome.app)
        elif our_form and outcome.redirect_uri is not None and urls.form_action_source(outcome.redirect_uri) is None:
            # Our confirmation form's redirect chain may only reach origins its page's form-action
            # names, and none can name this URI (a private-use scheme): go on by navigation (contract 5).
            self.continue_page(target, "Signed out", "You are signed out. Continue to the app.")
        else:
            self.redirect(target, status=status)
