"""The pages of sign-up, email and recovery (contract 18): sign-up and its confirmation, forgot
and reset password, email verification and change. Forms are POSTs with their XSRF token; what a
page says after a form that names an address is the same for every address.

The links in mail open these pages. Sign-up, verification and email change act on the link
itself; a reset link opens a form, and only the form's POST uses it.
"""

from __future__ import annotations

from typing import Any

from lbauth.core.accounts.recovery import return_address
from lbauth.errors import (
    LbauthError,
    LinkInvalid,
    LoginFailed,
    MailOff,
    MfaFailed,
    PasswordWeak,
    ResetInvalid,
    ValidationFailed,
)
from lbauth.handlers.account_pages import ACCOUNT, PASSWORDS_DIFFER
from lbauth.handlers.pages import PageHandler, signed_in

CHECK_EMAIL = "We sent a message to {email} if it can be used here. Follow its link to go on; it may take a minute."


class MailPage(PageHandler):
    """Pages that send mail, or follow its links: not there (404) when this server sends none."""
    open_before_enrolment = True  # LBAUTH_MFA=required: see PageHandler

    needs_signup = False

    async def prepare(self) -> None:
        settings = self.services.settings
        if not settings.mail_enabled or self.needs_signup and not settings.signup_open:
            super(PageHandler, self).prepare()  # the request id and the checks every request gets
            raise MailOff()
        await super().prepare()

    def message(self, heading: str, text: str, *, status: int = 200, link: tuple[str, str] | None = None) -> None:
        self.render_page("message.html", status=status, heading=heading, text=text, link=link)

    def link_refused(self, error: LbauthError) -> None:
        self.message("This link does not work", error.message, status=error.status,
                     link=("/password/forgot", "Ask for a new link") if isinstance(error, ResetInvalid)
                     else ("/login", "Sign in"))


class SignupPage(MailPage):
    """GET/POST {auth_url}/signup: name, email and password; then "check your email"."""

    needs_signup = True

    def show(self, status: int = 200, *, values: dict[str, str] | None = None,
             errors: dict[str, str] | None = None) -> None:
        values = values or {}
        self.render_page("signup.html", status=status, values={"name": values.get("name", ""),
                         "email": values.get("email", "")}, errors=errors or {},
                         next_url=return_address(values.get("next", self.get_query_argument("next", ""))) or "")

    def get(self) -> None:
        self.show()

    async def post(self) -> None:
        form = self.form()
        typed = {name: form.get(name, "")[:320] for name in ("name", "email", "next")}
        if form.get("password", "") != form.get("confirm_password", ""):
            self.show(400, values=typed, errors={"confirm_password": PASSWORDS_DIFFER})
            return
        self.services.rate_limits.hit("signup-address", self.request.remote_ip or "")
        self.services.rate_limits.hit("signup-account", form.get("email", "").strip())
        try:
            await self.services.recovery.request_signup(name=form.get("name", ""), email=form.get("email", ""),
                                                        password=form.get("password", ""), return_to=form.get("next"))
        except ValidationFailed as exc:
            self.show(400, values=typed, errors={exc.field if exc.field in ("name", "email") else "form": exc.message})
            return
        except PasswordWeak as exc:
            self.show(400, values=typed, errors={"password": exc.message})
            return
        self.services.metrics.signups.labels("requested").inc()
        self.message("Check your email", CHECK_EMAIL.format(email=form["email"].strip()[:320]))


class SignupConfirmPage(MailPage):
    """GET {auth_url}/signup/confirm?token=lba_su_...: the account is made, the browser signed in,
    and sent on to the authorization request the sign-up started from (else the account page)."""

    needs_signup = True

    async def get(self) -> None:
        try:
            signed_up = await self.services.recovery.confirm_signup(self.get_query_argument("token", ""),
                                                                    source=self.source())
        except LinkInvalid as exc:
            self.link_refused(exc)
            return
        self.services.metrics.signups.labels("completed").inc()
        if self.session is not None:
            await self.services.accounts.sign_out(self.session, self.source())
        self.start_session(signed_up.session_token)
        self.redirect(signed_up.return_to or ACCOUNT + "?saved=signup", status=303)


class ForgotPasswordPage(MailPage):
    """GET/POST {auth_url}/password/forgot: an address; then "check your email", for any address."""

    def get(self) -> None:
        self.render_page("forgot_password.html", email="", errors={})

    async def post(self) -> None:
        form = self.form()
        email = form.get("email", "").strip()[:320]
        self.services.rate_limits.hit("reset-address", self.request.remote_ip or "")
        self.services.rate_limits.hit("reset-account", email)
        try:
            await self.services.recovery.request_reset(email)
        except ValidationFailed as exc:
            self.render_page("forgot_password.html", status=400, email=email, errors={"email": exc.message})
            return
        self.services.metrics.password_resets.labels("requested").inc()
        self.message("Check your email", CHECK_EMAIL.format(email=email))


class ResetPasswordPage(MailPage):
    """GET {auth_url}/password/reset?token=lba_pr_...: the new-password form, for a live link;
    POST: the new password (twice), and the link is used."""

    def show(self, token: str, status: int = 200, errors: dict[str, str] | None = None,
             second_step: bool = False) -> None:
        """`second_step`: the account has a second factor; the form asks for a code too."""
        self.render_page("reset_password.html", status=status, token=token, errors=errors or {},
                         second_step=second_step)

    async def get(self) -> None:
        token = self.get_query_argument("token", "")
        if not await self.services.recovery.reset_link_works(token):
            self.link_refused(ResetInvalid())
            return
        self.show(token)

    async def post(self) -> None:
        form = self.form()
        token = form.get("token", "")
        second_step = "method" in form
        if form.get("new_password", "") != form.get("confirm_password", ""):
            self.show(token, 400, {"confirm_password": PASSWORDS_DIFFER}, second_step)
            return
        self.services.rate_limits.hit("reset-address", self.request.remote_ip or "")
        try:
            await self.services.recovery.reset_password(token, form.get("new_password", ""), form, self.source())
        except ResetInvalid as exc:
            self.link_refused(exc)
            return
        except (PasswordWeak, ValidationFailed) as exc:
            self.show(token, 400, {"new_password": exc.message}, second_step)
            return
        except MfaFailed as exc:  # the account has a second factor: the form asks for a code
            self.show(token, 401, {"code": exc.message if second_step else "This account has a second factor: "
                                   "enter a code from your authenticator app, or a recovery code."}, True)
            return
        self.services.metrics.password_resets.labels("completed").inc()
        if self.session is not None:  # ended with every other session: this cookie no longer works
            self.clear_cookie("lbauth_session")
            self.user = None
        self.message("Password changed", "Your new password is set, and every device was signed out. "
                     "Sign in with the new password.", link=("/login", "Sign in"))


class VerifyEmailPage(MailPage):
    """GET {auth_url}/email/verify?token=lba_ev_...: the address is verified."""

    async def get(self) -> None:
        try:
            email = await self.services.recovery.verify_email(self.get_query_argument("token", ""), self.source())
        except LinkInvalid as exc:
            self.link_refused(exc)
            return
        self.message("Email verified", f"{email} is verified. Apps you use see it within seconds.",
                     link=(ACCOUNT, "Your account"))


class ConfirmEmailChangePage(MailPage):
    """GET {auth_url}/email/confirm?token=lba_ec_...: the account's address becomes this one."""

    async def get(self) -> None:
        try:
            email = await self.services.recovery.confirm_email_change(self.get_query_argument("token", ""),
                                                                      self.source())
        except LinkInvalid as exc:
            self.link_refused(exc)
            return
        self.message("Email changed", f"Your account's address is now {email}. Sign in with it from now on.",
                     link=(ACCOUNT, "Your account"))


class VerifyEmailForm(MailPage):
    """POST /account/email/verify: send a verification link to the account's address."""

    @signed_in(next_url=ACCOUNT, status=401)
    async def post(self, form: dict[str, Any]) -> None:
        self.services.rate_limits.hit("mail-account", self.user.id)
        sent = await self.services.recovery.request_verification(self.user)
        self.redirect(ACCOUNT + ("?saved=verification" if sent else ""), status=303)


class ChangeEmailForm(MailPage):
    """POST /account/email: the new address and the password; a link goes to the new address."""

    @signed_in(next_url=ACCOUNT, status=401)
    async def post(self, form: dict[str, Any]) -> None:
        self.services.rate_limits.hit("mail-account", self.user.id)
        self.limit_login(self.user.email)
        try:
            await self.services.recovery.request_email_change(self.user, form.get("new_email", ""),
                                                              form.get("password", ""))
        except (LoginFailed, ValidationFailed) as exc:
            self.message("Your email was not changed", exc.message, status=exc.status, link=(ACCOUNT, "Back"))
            return
        self.redirect(ACCOUNT + "?saved=email", status=303)
