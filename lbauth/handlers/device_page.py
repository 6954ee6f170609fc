"""GET/POST {auth_url}/device: the user's side of the device grant (RFC 8628 3.3).

A signed-in user types the code their device shows (any case, dash optional; `?user_code=` from
`verification_uri_complete` fills it in), sees the consent page with a warning to go on only for a
device in front of them, and approves or denies. Wrong codes are limited to 5 a minute per session
and per address (RFC 8628 5.1): the sixth try is 429, right or wrong.
"""

from __future__ import annotations

from typing import Any

from lbauth.core import scopes
from lbauth.core.oauth.authorization.request import Answer
from lbauth.core.oauth.device import DeviceRequest, normalised, shown
from lbauth.errors import UserCodeInvalid, ValidationFailed
from lbauth.handlers.authorize_page import registered_by
from lbauth.handlers.pages import PageHandler, signed_in

_TYPED_MAX = 32  # what the form shows back of a code typed wrong


class DevicePage(PageHandler):

    @signed_in
    async def get(self) -> None:
        self.code_form(self.get_query_argument("user_code", ""))

    @signed_in
    async def post(self, form: dict[str, Any]) -> None:
        """The code, then (from the consent page, with the code again) the user's answer."""
        for kind, subject in self.guesses():
            self.services.rate_limits.check(kind, subject)
        device, typed, decision = self.services.oauth.device, form.get("user_code", ""), form.get("decision")
        if decision is not None and decision not in tuple(Answer):
            raise ValidationFailed("decision must be approve or deny")
        try:
            request = await device.pending(typed)
            if decision is None:
                self.consent_page(request)
            elif Answer(decision) is Answer.APPROVE:
                await device.approve(request, self.session, self.source())
                self.services.metrics.device_grants.labels("approved").inc()
                self.answered("Device connected", f"{request.app.name} can now use your account on that device.")
            else:
                await device.deny(request)
                self.services.metrics.device_grants.labels("denied").inc()
                self.answered("Access denied", f"{request.app.name} was not given access.")
        except UserCodeInvalid as wrong:
            for kind, subject in self.guesses():
                self.services.rate_limits.hit(kind, subject)
            self.code_form(typed, status=400, error=wrong.message)

    def answered(self, heading: str, outcome: str) -> None:
        self.render_page("message.html", heading=heading, text=f"{outcome} You can return to your device.", link=None)

    def guesses(self) -> tuple[tuple[str, str], ...]:
        """What wrong codes are counted against: this browser session, and the address."""
        assert self.session is not None  # @signed_in
        return ("device-session", self.session.session.id), ("device-address", self.request.remote_ip or "")

    def code_form(self, typed: str, status: int = 200, error: str | None = None) -> None:
        code = normalised(typed)
        self.render_page("device.html", status=status, error=error,
                         user_code=shown(code) if code is not None else typed[:_TYPED_MAX])

    def consent_page(self, request: DeviceRequest) -> None:
        """The authorization page's consent, for a device: the user code shown again, and the
        warning (RFC 8628 5.4: a code sent by someone else is remote phishing)."""
        self.render_page("consent.html", app=request.app, registered_by=registered_by(request.app),
                         scopes=[(name, scopes.SCOPES[name]) for name in request.scopes], resources=request.resources,
                         hidden=[("user_code", request.user_code)], device_user_code=request.user_code)
