"""{auth_url}/console/: app owners register and run their apps (contract section 12). A signed-in
user sees and changes only the apps they own; secrets are shown once, on the page that made them."""

from __future__ import annotations

from typing import Any

from lbauth.core import scopes
from lbauth.core.audit import Actor
from lbauth.core.crypto.keys import ID_TOKEN_DEFAULT_ALG
from lbauth.core.oidc.id_tokens import ID_TOKEN_ALGS
from lbauth.errors import ApplicationNotFound, NotFound, ValidationFailed
from lbauth.handlers.operator_json import app_json, attempt_json, event_json
from lbauth.handlers.pages import PageHandler, signed_in
from lbauth.storage.records import DEVICE_CODE_GRANT_TYPE, App

_NOTICES = {
    "saved": "Changes saved.",
    "test": "Test webhook queued. Its delivery appears below within seconds; reload to see it.",
    "redelivered": "Event queued again for delivery.",
    "enabled": "Webhook re-enabled.",
}


class ConsolePage(PageHandler):
    script_src = "'self'"  # static/console.js: the copy buttons

    def sign_in_next(self) -> str:
        return self.request.path

    async def owned_app(self, client_id: str) -> App:
        """The app, if the signed-in user owns it; 404 for any other (no hint that it exists)."""
        try:
            row = await self.services.apps.get(client_id)
        except ApplicationNotFound:
            row = None
        if row is None or row.owner_id != self.user.id:
            raise NotFound("You have no app with this client id.")
        return row

    async def render_app(self, client_id: str, status: int = 200, **context: Any) -> None:
        app = app_json(await self.owned_app(client_id))
        events, attempts = await self.services.apps.deliveries(client_id, limit=50)
        self.render_page("console_app.html", status=status, app=app,
                         events=[event_json(event, with_error=True) for event in events],
                         attempts={event_id: [attempt_json(attempt) for attempt in tried]
                                   for event_id, tried in attempts.items()},
                         meanings=scopes.SCOPES, algs=ID_TOKEN_ALGS, device_grant=DEVICE_CODE_GRANT_TYPE,
                         notice=_NOTICES.get(self.get_query_argument("done", "")),
                         secrets=context.pop("secrets", {}), error=context.pop("error", None),
                         created=context.pop("created", False), **context)

    def render_form_error(self, template: str, error: ValidationFailed, **context: Any) -> None:
        self.render_page(template, status=400, error=error.message, meanings=scopes.SCOPES, algs=ID_TOKEN_ALGS,
                         **context)

    async def ensure_id_token_key(self, alg: str | None) -> None:
        """The key ring holds an active key for every algorithm an app asks for (contract 8): made
        before the app asks, so that its first ID token finds it; this process reloads at once."""
        if alg is None:
            return
        if alg not in ID_TOKEN_ALGS:
            raise ValidationFailed(f"the ID-token algorithm must be one of {', '.join(ID_TOKEN_ALGS)}")
        await self.services.activate_signing_key(alg)


class ConsoleHome(ConsolePage):
    """GET /console/: the apps the user owns."""

    @signed_in
    async def get(self) -> None:
        owned = await self.services.apps.all_apps(owner_id=self.user.id)
        self.render_page("console_home.html", apps=[app_json(app) for app in owned])


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _app_fields(form: dict[str, Any]) -> dict[str, Any]:
    return {"name": form.get("name", ""),
            "redirect_uris": _lines(form.get("redirect_uris", "")),
            "allowed_scopes": form.get("scopes") or None,
            "webhook_url": form.get("webhook_url", "").strip(),
            # OpenID Connect (contract 15): the ID tokens' algorithm, and RP-initiated logout's URIs
            "id_token_alg": form.get("id_token_alg") or None,
            "post_logout_redirect_uris": _lines(form.get("post_logout_redirect_uris", "")),
            "device": form.get("device") == "on"}  # the device grant (RFC 8628)


class NewAppPage(ConsolePage):
    """GET/POST /console/apps/new: register an app; its two secrets are shown once."""

    @signed_in
    async def get(self) -> None:
        self.render_page("console_new.html", meanings=scopes.SCOPES, algs=ID_TOKEN_ALGS, error=None, values={})

    @signed_in(lists=("scopes",))
    async def post(self, form: dict[str, Any]) -> None:
        fields = _app_fields(form)
        try:
            await self.ensure_id_token_key(fields["id_token_alg"])
            created = await self.services.apps.create(
                owner_email=self.user.email, name=fields["name"], redirect_uris=fields["redirect_uris"],
                allowed_scopes=fields["allowed_scopes"], webhook_url=fields["webhook_url"] or None,
                id_token_alg=fields["id_token_alg"] or ID_TOKEN_DEFAULT_ALG, public=form.get("client_type") == "public",
                post_logout_redirect_uris=fields["post_logout_redirect_uris"], device=fields["device"],
                actor=Actor.user(self.user.id), source=self.source())
        except ValidationFailed as exc:
            self.render_form_error("console_new.html", exc, values=form)
            return
        await self.render_app(created.client_id, created=True,
                              secrets={name: secret for name, secret in (("client", created.client_secret),
                                       ("webhook", created.webhook_secret)) if secret})  # a public client: none


class AppPage(ConsolePage):
    """GET /console/apps/{client_id}: settings, secrets, webhook and deliveries. POST `action`:
    save, rotate-secret, rotate-webhook-secret, test-webhook, redeliver (`event_id`), enable-webhook."""

    @signed_in
    async def get(self, client_id: str) -> None:
        await self.render_app(client_id)

    @signed_in(lists=("scopes",))
    async def post(self, client_id: str, form: dict[str, Any]) -> None:
        await self.owned_app(client_id)
        operator, action = self.services.apps, form.get("action")
        try:
            if action == "save":
                fields = _app_fields(form)
                await self.ensure_id_token_key(fields["id_token_alg"])
                await operator.update(client_id, name=fields["name"], redirect_uris=fields["redirect_uris"],
                                      allowed_scopes=fields["allowed_scopes"] or list(scopes.ALL),
                                      webhook_url=fields["webhook_url"], id_token_alg=fields["id_token_alg"],
                                      post_logout_redirect_uris=fields["post_logout_redirect_uris"],
                                      device=fields["device"])
                done = "saved"
            elif action == "rotate-secret":
                secret = await operator.rotate_client_secret(client_id, Actor.user(self.user.id), self.source())
                await self.render_app(client_id, secrets={"client": secret})
                return
            elif action == "rotate-webhook-secret":
                secret = await operator.rotate_webhook_secret(client_id, Actor.user(self.user.id), self.source())
                await self.render_app(client_id, secrets={"webhook": secret})
                return
            elif action == "test-webhook":
                await operator.send_test_event(client_id)
                done = "test"
            elif action == "redeliver":
                await operator.redeliver(client_id, form.get("event_id", ""))
                done = "redelivered"
            elif action == "enable-webhook":
                await operator.update(client_id, enable_webhook=True)
                done = "enabled"
            else:
                raise ValidationFailed("Unknown action.")
        except ValidationFailed as exc:
            await self.render_app(client_id, status=400, error=exc.message)
            return
        self.redirect(f"/console/apps/{client_id}?done={done}", status=303)
