"""Passkeys in the pages (contract 19): the calls that static/passkeys.js makes from the security
page (adding one) and the sign-in pages (signing in with one, or a second step with one), and the
security page's form that removes one.

A call is a same-origin `fetch` with the page's session cookie and its XSRF token in the
`X-XSRFToken` header (Tornado's double-submit check, as the forms); JSON in, the envelope out,
errors included. The browser part needs no library: `PublicKeyCredential.parseCreationOptionsFromJSON`,
`parseRequestOptionsFromJSON` and `credential.toJSON()` speak the JSON the server reads and writes.
"""

from __future__ import annotations

from typing import Any

import tornado.web

from lbauth.core.accounts.sessions import BROWSER
from lbauth.errors import LbauthError, PasskeyNotFound, ReauthenticationRequired, SessionRequired
from lbauth.handlers.base import BaseHandler
from lbauth.handlers.pages import MFA_COOKIE, MFA_COOKIE_PATH, PageHandler, safe_next, signed_in
from lbauth.handlers.security import passkey_json
from lbauth.handlers.security_pages import SECURITY, SecurityForms


class PasskeyCall(PageHandler):
    """A script's call: XSRF checked, errors as the JSON envelope rather than an HTML page."""
    open_before_enrolment = True  # LBAUTH_MFA=required: see PageHandler

    def render_error(self, error: LbauthError) -> None:
        BaseHandler.render_error(self, error)

    def call(self) -> dict[str, Any]:
        tornado.web.RequestHandler.check_xsrf_cookie(self)
        return self.json_body() if self.body else {}

    def send_options(self, options: str) -> None:
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish('{"code":0,"data":' + options + "}")

    def mfa_token(self) -> str:
        cookie = self.get_signed_cookie(MFA_COOKIE, max_age_days=1)
        return cookie.decode() if cookie else ""

    async def signed_in_by_script(self, session_token: str, next_url: str) -> None:
        """The session cookie set; the script goes on to `next_url` (a navigation, which
        `form-action` does not govern)."""
        if self.session is not None:
            await self.services.accounts.sign_out(self.session, self.source())
        self.start_session(session_token)
        self.send_data({"next": next_url})


class AddPasskeyOptions(PasskeyCall):
    """POST /account/security/passkeys/options -> creation options for a new passkey."""

    async def post(self) -> None:
        self.call()
        if self.user is None:
            raise SessionRequired()
        self.send_options(await self.services.passkeys.registration_options(self.user))


class AddPasskey(PasskeyCall):
    """POST /account/security/passkeys {credential, name} -> {passkey[, recoveryCodes]}."""

    async def post(self) -> None:
        body = self.call()
        if self.user is None:
            raise SessionRequired()
        added = await self.services.passkeys.add(self.user, body.get("credential"), body.get("name"), self.source())
        data: dict[str, Any] = {"passkey": passkey_json(added.passkey)}
        if added.recovery_codes is not None:
            data["recoveryCodes"] = added.recovery_codes
        self.send_data(data)


class PasskeySignInOptions(PasskeyCall):
    """POST /login/passkey/options -> request options for any of the site's passkeys."""

    async def post(self) -> None:
        self.call()
        self.services.rate_limits.hit("login-address", self.request.remote_ip or "")  # each writes a challenge
        self.send_options(await self.services.passkeys.sign_in_options(self.user))


class PasskeySignIn(PasskeyCall):
    """POST /login/passkey {credential, next} -> the session cookie and {next}: a complete sign-in."""

    async def post(self) -> None:
        body = self.call()
        self.services.rate_limits.hit("login-address", self.request.remote_ip or "")  # as a password sign-in
        next_url = safe_next(body.get("next") if isinstance(body.get("next"), str) else None)
        session = await self.services.passkeys.sign_in(body.get("credential"), kind=BROWSER, signed_in=self.user,
                                                       source=self.source())
        await self.signed_in_by_script(session.token, next_url)


class SecondStepOptions(PasskeyCall):
    """POST /login/mfa/passkey/options -> request options for the pending user's passkeys."""

    async def post(self) -> None:
        self.call()
        self.send_options(await self.services.passkeys.second_step_options(self.mfa_token()))


class SecondStep(PasskeyCall):
    """POST /login/mfa/passkey {credential, next} -> the session cookie and {next}."""

    async def post(self) -> None:
        body = self.call()
        next_url = safe_next(body.get("next") if isinstance(body.get("next"), str) else None)
        with self.services.metrics.second_step("passkey"):
            session = await self.services.passkeys.complete_second_step(
                self.mfa_token(), body.get("credential"), kind=BROWSER, source=self.source())
        self.clear_cookie(MFA_COOKIE, path=MFA_COOKIE_PATH)
        await self.signed_in_by_script(session.token, next_url)


class RemovePasskeyForm(SecurityForms):
    """POST /account/security/passkeys/{id}/remove: remove a passkey (a recent sign-in needed)."""

    @signed_in(next_url=SECURITY, status=401)
    async def post(self, passkey_id: str, form: dict[str, Any]) -> None:
        try:
            await self.services.passkeys.remove(self.session, passkey_id, self.source())
        except ReauthenticationRequired:
            self.sign_in_again("remove a passkey")
            return
        except PasskeyNotFound as exc:
            await self.show(404, error=exc.message)
            return
        self.redirect(SECURITY + "?saved=passkey_removed", status=303)

