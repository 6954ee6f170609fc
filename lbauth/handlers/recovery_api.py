"""Sign-up, email and account recovery over the API (contract 18). Requests that name an address
answer 202 `{"status": "check_email"}` whatever the address: lbauth never tells who has an account."""

from __future__ import annotations

from lbauth.core.accounts.recovery import return_address
from lbauth.errors import MailOff, ValidationFailed
from lbauth.handlers.account import UserTokenHandler, strings
from lbauth.handlers.base import BaseHandler

CHECK_EMAIL = {"status": "check_email"}


class MailHandler(BaseHandler):
    """Endpoints that send mail: not there (404) when this server sends none."""

    def prepare(self) -> None:
        super().prepare()
        if not self.services.settings.mail_enabled:
            raise MailOff()

    def limit_mail(self, kind: str, subject: str) -> None:
        """Per source address and per address mailed (contract 18)."""
        self.services.rate_limits.hit(f"{kind}-address", self.request.remote_ip or "")
        self.services.rate_limits.hit(f"{kind}-account", subject.strip())


class SignupHandler(MailHandler):
    """POST /api/auth/signup {name, email, password[, returnTo]} -> 202 check_email."""

    def prepare(self) -> None:
        super().prepare()
        if not self.services.settings.signup_open:
            raise MailOff()

    async def post(self) -> None:
        body = self.json_body()
        name, email, password = strings(body, "name", "email", "password")
        return_to = body.get("returnTo") or None
        if return_to is not None and return_address(return_to) is None:
            raise ValidationFailed("returnTo must be an authorization request on this server: /oauth/?...",
                                   field="returnTo")
        self.limit_mail("signup", email)
        await self.services.recovery.request_signup(name=name, email=email, password=password, return_to=return_to)
        self.services.metrics.signups.labels("requested").inc()
        self.send_data(CHECK_EMAIL, status=202)


class ForgotPasswordHandler(MailHandler):
    """POST /api/auth/password/forgot {email} -> 202 check_email, for any address alike."""

    async def post(self) -> None:
        (email,) = strings(self.json_body(), "email")
        self.limit_mail("reset", email)
        await self.services.recovery.request_reset(email)
        self.services.metrics.password_resets.labels("requested").inc()
        self.send_data(CHECK_EMAIL, status=202)


class ResetPasswordHandler(MailHandler):
    """POST /api/auth/password/reset {token, newPassword[, method, code]} -> {"status": "reset"}."""

    async def post(self) -> None:
        body = self.json_body()
        token, new_password = strings(body, "token", "newPassword")
        self.services.rate_limits.hit("reset-address", self.request.remote_ip or "")
        await self.services.recovery.reset_password(token, new_password, body, self.source())
        self.services.metrics.password_resets.labels("completed").inc()
        self.send_data({"status": "reset"})


class VerifyEmailHandler(MailHandler, UserTokenHandler):
    """POST /api/account/email/verify -> 202 check_email (200 `verified` when it already is)."""

    async def post(self) -> None:
        me = await self.signed_in()
        self.services.rate_limits.hit("mail-account", me.user.id)
        if await self.services.recovery.request_verification(me.user):
            self.send_data(CHECK_EMAIL, status=202)
        else:
            self.send_data({"status": "verified"})


class ChangeEmailHandler(MailHandler, UserTokenHandler):
    """POST /api/account/email {newEmail, password} -> 202 check_email; the link goes to the new
    address, and an address another account has gets the same answer and no change."""

    async def post(self) -> None:
        me = await self.signed_in()
        new_email, password = strings(self.json_body(), "newEmail", "password")
        self.services.rate_limits.hit("mail-account", me.user.id)
        self.limit_login(me.user.email)
        await self.services.recovery.request_email_change(me.user, new_email, password)
        self.send_data(CHECK_EMAIL, status=202)
