"""Second factors over the API (contract 19): the sign-in's second step, and the user's TOTP
authenticator and recovery codes (Bearer user token)."""

from __future__ import annotations

from typing import Any

from lbauth.clock import iso
from lbauth.core.accounts.sessions import API
from lbauth.handlers.account import UserTokenHandler, strings
from lbauth.handlers.base import BaseHandler
from lbauth.storage.records import Passkey


class LoginMfaHandler(BaseHandler):
    """POST /api/auth/login/mfa {mfaToken, method, code} -> {token, expiresIn}."""

    async def post(self) -> None:
        mfa_token, method, code = strings(self.json_body(), "mfaToken", "method", "code")
        with self.services.metrics.second_step(method):
            session = await self.services.factors.complete_sign_in(mfa_token, method, code, kind=API,
                                                                   source=self.source())
        self.send_data({"token": session.token, "expiresIn": session.expires_in})


class SecurityHandler(UserTokenHandler):
    """GET /api/account/security -> {passkeys, totp, recoveryCodesLeft}."""
    open_before_enrolment = True

    async def get(self) -> None:
        me = await self.signed_in()
        security = await self.services.factors.security(me.user)
        self.send_data({"passkeys": [passkey_json(p) for p in security.passkeys], "totp": security.totp,
                        "recoveryCodesLeft": security.recovery_codes_left})


class TotpHandler(UserTokenHandler):
    """POST /api/account/security/totp: a new authenticator to confirm; DELETE removes it (a recent
    sign-in needed)."""
    open_before_enrolment = True

    async def post(self) -> None:
        me = await self.signed_in()
        enrolment = await self.services.factors.enrol_totp(me.user)
        self.send_data({"secret": enrolment.secret, "otpauthUri": enrolment.otpauth_uri, "qrSvg": enrolment.qr_svg})

    async def delete(self) -> None:
        await self.services.factors.remove_totp(await self.signed_in(), self.source())
        self.send_data({"totp": False})


class PasskeyHandler(UserTokenHandler):
    """DELETE /api/account/security/passkeys/{id}: remove a passkey (a recent sign-in needed).
    Passkeys are added in a browser, at /account/security."""

    async def delete(self, passkey_id: str) -> None:
        await self.services.passkeys.remove(await self.signed_in(), passkey_id, self.source())
        self.send_data({"removed": passkey_id})


class TotpConfirmHandler(UserTokenHandler):
    """POST /api/account/security/totp/confirm {code} -> {totp: true[, recoveryCodes]}."""
    open_before_enrolment = True

    async def post(self) -> None:
        me = await self.signed_in()
        (code,) = strings(self.json_body(), "code")
        confirmed = await self.services.factors.confirm_totp(me.user, code, self.source())
        data: dict[str, object] = {"totp": True}
        if confirmed.recovery_codes is not None:
            data["recoveryCodes"] = confirmed.recovery_codes
        self.send_data(data)


class RecoveryCodesHandler(UserTokenHandler):
    """POST /api/account/security/recovery-codes -> {recoveryCodes}: ten new ones, the old ones void."""

    async def post(self) -> None:
        self.send_data({"recoveryCodes": await self.services.factors.regenerate_codes(await self.signed_in(),
                                                                                     self.source())})


def passkey_json(passkey: Passkey) -> dict[str, Any]:
    """A passkey as the API and the pages' script show it; `synced`: it may live on other devices
    (backup eligible)."""
    return {"id": passkey.id, "name": passkey.name, "createdAt": iso(passkey.created_at),
            "lastUsedAt": iso(passkey.last_used_at) if passkey.last_used_at is not None else None,
            "synced": passkey.backup_eligible}
