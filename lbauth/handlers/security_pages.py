"""The second-factors page at {auth_url}/account/security: what the user has (an authenticator app,
passkeys, recovery codes left), setting up an authenticator app (a QR code and the secret, then one
code to confirm it), removing it, and new recovery codes. No JavaScript: every action is a POST
form with its XSRF token. The QR code is an inline <svg> element, which the pages' CSP allows.

Removing the app and new recovery codes need a recent sign-in (the core's ReauthenticationRequired):
the answer is the sign-in form, coming back to this page, with a sentence saying why; the user then
presses the button again."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from lbauth.core.factors.factors import Enrolment
from lbauth.errors import MfaFailed, RateLimited, ReauthenticationRequired, TotpExists, TotpNotFound
from lbauth.handlers.pages import PageHandler, safe_next, signed_in

SECURITY = "/account/security"
TOTP_FORM, CONFIRM_FORM = "/account/security/totp", "/account/security/totp/confirm"
REMOVE_FORM, CODES_FORM = "/account/security/totp/remove", "/account/security/recovery-codes"
SAVED_NOTICES = ("removed", "reauthenticated", "confirmed", "passkey_added", "passkey_removed")
REAUTHENTICATE = "For your safety, sign in again to {action}; then press the button again."


def grouped(secret: str) -> str:
    """The base32 secret in groups of four, easier to read and type."""
    return " ".join(secret[i:i + 4] for i in range(0, len(secret), 4))


class SecurityForms(PageHandler):
    """The security page: shown by GET, and again by each form's POST with what it did."""
    open_before_enrolment = True  # LBAUTH_MFA=required: see PageHandler
    script_src = "'self'"  # static/passkeys.js: adding a passkey

    async def show(self, status: int = 200, *, enrolment: Enrolment | None = None, confirming: bool = False,
                   codes: list[str] | None = None, error: str | None = None, saved: str | None = None) -> None:
        security = await self.services.factors.security(self.user)
        self.render_page("security.html", status=status, active_page="security", security=security,
                         enrolment=enrolment, secret=grouped(enrolment.secret) if enrolment else None,
                         confirming=confirming or enrolment is not None, codes=codes, error=error,
                         saved=saved if saved in SAVED_NOTICES else None, next_url=self.continue_to(),
                         required=self.services.settings.mfa == "required")

    def continue_to(self) -> str | None:
        """Where the user was going when LBAUTH_MFA=required sent them here (`next`, in the query or
        a form): the page links there once a factor is set up."""
        raw = self.get_argument("next", None)
        return safe_next(raw) if raw else None

    def sign_in_again(self, action: str) -> None:
        """A recent sign-in is needed: the sign-in form, back to this page with a notice."""
        self.login_form(SECURITY + "?saved=reauthenticated", status=403, email=self.user.email,
                        error=REAUTHENTICATE.format(action=action))


class SecurityPage(SecurityForms):
    """GET /account/security."""

    @signed_in
    async def get(self) -> None:
        await self.show(saved=self.get_query_argument("saved", None))


class TotpForm(SecurityForms):
    """POST /account/security/totp: a new authenticator app to set up (a QR code, the secret, and
    the form for its first code); one already set up is refused on the page."""

    @signed_in(next_url=SECURITY, status=401)
    async def post(self, form: dict[str, Any]) -> None:
        try:
            enrolment = await self.services.factors.enrol_totp(self.user)
        except TotpExists as exc:
            await self.show(409, error=exc.message)
            return
        await self.show(enrolment=enrolment)


class TotpConfirmForm(SecurityForms):
    """POST /account/security/totp/confirm (code): a right code sets the app up and shows the ten
    recovery codes, this once; a wrong one shows the form again with the error."""

    @signed_in(next_url=SECURITY, status=401)
    async def post(self, form: dict[str, Any]) -> None:
        try:
            confirmed = await self.services.factors.confirm_totp(self.user, form.get("code", ""), self.source())
        except (MfaFailed, RateLimited) as exc:
            await self.show(exc.status, confirming=True, error=exc.message)
            return
        except TotpNotFound:  # set up already (a repeated post), or never started
            self.redirect(SECURITY, status=303)
            return
        if confirmed.recovery_codes is None:
            back = self.continue_to()
            self.redirect(SECURITY + "?" + urlencode({"saved": "confirmed", **({"next": back} if back else {})}),
                          status=303)
            return
        await self.show(codes=confirmed.recovery_codes, saved="confirmed")


class TotpRemoveForm(SecurityForms):
    """POST /account/security/totp/remove: remove the authenticator app (and the recovery codes)."""

    @signed_in(next_url=SECURITY, status=401)
    async def post(self, form: dict[str, Any]) -> None:
        try:
            await self.services.factors.remove_totp(self.session, self.source())
        except ReauthenticationRequired:
            self.sign_in_again("remove your authenticator app")
            return
        except TotpNotFound as exc:
            await self.show(404, error=exc.message)
            return
        self.redirect(SECURITY + "?saved=removed", status=303)


class RecoveryCodesForm(SecurityForms):
    """POST /account/security/recovery-codes: ten new codes, shown this once; the old ones stop working."""

    @signed_in(next_url=SECURITY, status=401)
    async def post(self, form: dict[str, Any]) -> None:
        try:
            codes = await self.services.factors.regenerate_codes(self.session, self.source())
        except ReauthenticationRequired:
            self.sign_in_again("make new recovery codes")
            return
        except TotpNotFound as exc:
            await self.show(404, error=exc.message)
            return
        await self.show(codes=codes)
