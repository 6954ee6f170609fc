"""Registered applications (spec section 1, contract section 2): client credentials, redirect
URIs, allowed scopes, the revocation webhook. Secrets are shown once: the client secret is kept
only as a SHA-256 digest, the webhook secret only sealed under the master key."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from lbauth.clock import Clock
from lbauth.core import audit
from lbauth.core.clients import metadata, outbox
from lbauth.core.crypto import opaque
from lbauth.core.crypto.keys import ID_TOKEN_DEFAULT_ALG
from lbauth.core.crypto.masterkey import MasterKeys
from lbauth.errors import ApplicationNotFound, ValidationFailed
from lbauth.storage import Connection
from lbauth.storage.db import Database
from lbauth.storage.records import (
    DEFAULT_GRANT_TYPES,
    DEVICE_CODE_GRANT_TYPE,
    KEEP,
    PUBLIC_CLIENT_METHOD,
    App,
    AppChanges,
    ClientMetadata,
    Registration,
    WebhookAttempt,
    WebhookEvent,
)
from lbauth.storage.repo import apps as repo
from lbauth.storage.repo import users as users_repo


@dataclass(frozen=True)
class AppPolicy:
    """What the deployment allows in app settings: development's redirect URIs, and the grant
    types an app may register for (the token endpoint's, `server.GRANT_TYPE_NAMES`)."""
    development: bool
    grant_types: tuple[str, ...] = DEFAULT_GRANT_TYPES


CONFIDENTIAL = "client_secret_basic"  # token_endpoint_auth_method (RFC 7591 2) of an operator's confidential app
# How `ValidationFailed` names the fields an operator sets, in `lbauth apps` and the console.
_LABELS = {"client_name": "app name", "redirect_uris": "redirect URIs", "id_token_alg": "the ID-token algorithm",
           "post_logout_redirect_uris": "post-logout redirect URIs", "webhook_url": "webhook URL"}


@dataclass(frozen=True)
class CreatedApp:
    """An app just registered by an operator or its owner, with both secrets, shown this once (the
    client secret is None for a public client)."""
    app_id: str
    client_id: str
    client_secret: str | None = field(repr=False)
    webhook_secret: str = field(repr=False)
    redirect_uris: list[str]
    scopes: list[str]
    webhook_url: str | None


def intake(policy: AppPolicy) -> metadata.Intake:
    """An operator's app: every field of the client model, the operator's own among them."""
    return metadata.Intake(Registration.OPERATOR, auth_methods=(CONFIDENTIAL, PUBLIC_CLIENT_METHOD),
                           default_auth_method=CONFIDENTIAL, grant_types=policy.grant_types,
                           development=policy.development,
                           fields=metadata.CLIENT_FIELDS + metadata.OPERATOR_FIELDS)


@contextmanager
def _as_validation_failed() -> Iterator[None]:
    """The operator's error for a refused field (contract 2: `request.validation_failed`)."""
    try:
        yield
    except metadata.MetadataRefused as refused:
        raise ValidationFailed(refused.message(_LABELS.get(refused.field))) from None


class Apps:
    """The operator's apps (`lbauth apps`, the console): create, read, change, rotate secrets, and
    their webhook deliveries."""

    def __init__(self, db: Database, clock: Clock, master_keys: Callable[[], MasterKeys], policy: AppPolicy) -> None:
        self.db, self.clock, self.master_keys = db, clock, master_keys
        self.intake = intake(policy)

    async def create(self, *, name: str, owner_email: str, redirect_uris: Sequence[str],
                     allowed_scopes: Sequence[str] | None = None, webhook_url: str | None = None,
                     id_token_alg: str = ID_TOKEN_DEFAULT_ALG, post_logout_redirect_uris: Sequence[str] = (),
                     public: bool = False, device: bool = False, actor: audit.Actor = audit.OPERATOR,
                     source: audit.Source = audit.NO_SOURCE) -> CreatedApp:
        """Register an app; returns it with both secrets, shown this once. A public client (contract
        17: `token_endpoint_auth_method` none) has no client secret. `device`: it may use the device
        grant (RFC 8628). `actor`: an operator (`lbauth apps create`) or the owner (the console),
        for the audit log."""
        with _as_validation_failed():
            client = metadata.validate({
                "client_name": name, "redirect_uris": list(redirect_uris),
                "token_endpoint_auth_method": PUBLIC_CLIENT_METHOD if public else CONFIDENTIAL,
                "scopes": allowed_scopes, "webhook_url": webhook_url, "id_token_alg": id_token_alg,
                "post_logout_redirect_uris": list(post_logout_redirect_uris),
                "grant_types": _with_grant(list(DEFAULT_GRANT_TYPES), DEVICE_CODE_GRANT_TYPE, device)}, self.intake)
        client_id = opaque.new_id("cid_")

        def work(conn: Connection) -> metadata.NewApp:
            owner = users_repo.by_email(conn, (owner_email or "").strip().lower())
            if owner is None:
                raise ValidationFailed("the owner must be an existing user's email")
            now = int(self.clock.now())
            created = metadata.insert(conn, self.master_keys(), client, client_id=client_id, now=now, owner_id=owner.id)
            audit.record(conn, now, audit.EventType.APP_CREATED, actor, user_id=owner.id, source=source,
                         detail={"clientId": client_id, "app": client.name})
            return created

        created = await self.db.transaction(work)
        return CreatedApp(created.app_id, client_id, created.client_secret, created.webhook_secret,
                          list(client.redirect_uris), list(client.scopes), client.webhook_url)

    async def get(self, client_id: str) -> App:
        app = await self.db.read(repo.by_client_id, client_id) if isinstance(client_id, str) else None
        if app is None:
            raise ApplicationNotFound()
        return app

    async def all_apps(self, owner_id: str | None = None) -> list[App]:
        return await self.db.read(repo.all_apps, owner_id)

    async def update(self, client_id: str, *, name: str | None = None, redirect_uris: Sequence[str] | None = None,
                     allowed_scopes: Sequence[str] | None = None, webhook_url: str | None = None,
                     enable_webhook: bool = False, id_token_alg: str | None = None,
                     post_logout_redirect_uris: Sequence[str] | None = None,
                     require_par: bool | None = None, require_dpop: bool | None = None,
                     device: bool | None = None) -> App:
        """Change what is given, and return the app changed; `webhook_url=""` removes the webhook;
        `require_par`: only pushed authorization requests (RFC 9126 6); `require_dpop`: only
        DPoP-bound tokens (RFC 9449 5.2); `device`: the device grant (RFC 8628) added to its
        `grant_types`, or removed."""
        given = {"client_name": name, "redirect_uris": None if redirect_uris is None else list(redirect_uris),
                 "scopes": allowed_scopes, "webhook_url": webhook_url, "id_token_alg": id_token_alg,
                 "post_logout_redirect_uris": post_logout_redirect_uris,
                 "require_pushed_authorization_requests": require_par, "dpop_bound_access_tokens": require_dpop}
        with _as_validation_failed():
            checked = metadata.check(given, self.intake, [field for field, value in given.items() if value is not None])
        changes = AppChanges(name=checked.get("name"), redirect_uris=checked.get("redirect_uris"),
                             scopes=checked.get("scopes"), webhook_url=checked.get("webhook_url", KEEP),
                             webhook_disabled_at=None if webhook_url is not None or enable_webhook else KEEP,
                             id_token_alg=checked.get("id_token_alg"),
                             post_logout_redirect_uris=checked.get("post_logout_redirect_uris"))
        extensions: dict[str, Any] = {name: checked[name] for name in ("require_pushed_authorization_requests",
                                                        "dpop_bound_access_tokens") if name in checked}
        grants = {} if device is None else {DEVICE_CODE_GRANT_TYPE: device}
        return await self._change(client_id, changes, extensions, grants)

    async def rotate_client_secret(self, client_id: str, actor: audit.Actor = audit.OPERATOR,
                                   source: audit.Source = audit.NO_SOURCE) -> str:
        """A confidential app's new secret, shown this once; a public client has none to rotate
        (contract 17). Whether an app is public never changes, so it is checked before the change."""
        if (await self.get(client_id)).public:
            raise ValidationFailed("This app is a public client: it has no client secret to rotate.")
        secret = opaque.new_secret(opaque.CLIENT_SECRET)
        await self._change(client_id, AppChanges(client_secret_hash=opaque.digest(secret)),
                           rotated=_Rotation("client", actor, source))
        return secret

    async def rotate_webhook_secret(self, client_id: str, actor: audit.Actor = audit.OPERATOR,
                                    source: audit.Source = audit.NO_SOURCE) -> str:
        """The app's new webhook secret, shown this once."""
        secret = opaque.new_secret(opaque.WEBHOOK_SECRET)
        app = await self.get(client_id)
        sealed = self.master_keys().seal(secret.encode(), metadata.webhook_secret_purpose(app.id))
        await self._change(client_id, AppChanges(webhook_secret_sealed=sealed),
                           rotated=_Rotation("webhook", actor, source))
        return secret

    async def _change(self, client_id: str, changes: AppChanges, extensions: dict[str, Any] | None = None,
                      grants: dict[str, bool] | None = None, rotated: _Rotation | None = None) -> App:
        """`extensions`: new values of fields kept in `client_metadata`, merged into the stored ones;
        `grants`: grant types added to (True) or removed from (False) the stored `grant_types`;
        `rotated`: the change is a new secret, recorded in the audit log with it."""
        def work(conn: Connection) -> App:
            app = repo.by_client_id(conn, client_id, lock=bool(extensions or grants))
            if app is None:
                raise ApplicationNotFound()
            change = changes
            if extensions or grants:
                merged = dataclasses.replace(ClientMetadata.of(app), **(extensions or {}))
                if grants:
                    merged = dataclasses.replace(merged, **self._granted(merged.grant_types, grants))
                change = dataclasses.replace(changes, client_metadata=merged.extensions())
            now = int(self.clock.now())
            repo.update_app(conn, app.id, change, now)
            if rotated is not None:
                audit.record(conn, now, audit.EventType.SECRET_ROTATED, rotated.actor, user_id=app.owner_id,
                             source=rotated.source, detail={"clientId": client_id, "app": app.name,
                                                            "secret": rotated.secret})
            changed = repo.by_client_id(conn, client_id)
            assert changed is not None  # in this transaction, since the read above
            return changed
        return await self.db.transaction(work)

    def _granted(self, grant_types: list[str], grants: dict[str, bool]) -> dict[str, Any]:
        """The `grant_types` field with `grants` added or removed, checked as a registration's."""
        for grant_type, wanted in grants.items():
            grant_types = _with_grant(grant_types, grant_type, wanted)
        with _as_validation_failed():
            return metadata.check({"grant_types": grant_types}, self.intake, ["grant_types"])

    # ---- the app's webhook deliveries (contract 10 and 12) --------------------------------------------

    async def deliveries(self, client_id: str,
                         limit: int) -> tuple[list[WebhookEvent], dict[str, list[WebhookAttempt]]]:
        """The app's latest webhook events, and each one's attempts by event id."""
        events = (await outbox.list_events(self.db, client_id=client_id))[:limit]
        return events, await outbox.attempts_of(self.db, [event.id for event in events])

    async def send_test_event(self, client_id: str) -> str:
        """The test event's id."""
        return await outbox.send_test(self.db, self.clock, client_id)

    async def redeliver(self, client_id: str, event_id: str) -> WebhookEvent:
        return await outbox.redeliver(self.db, self.clock, event_id, client_id=client_id)


@dataclass(frozen=True)
class _Rotation:
    """A secret rotated (`client` or `webhook`), by whom and from where: its audit event."""
    secret: str
    actor: audit.Actor
    source: audit.Source


def _with_grant(grant_types: list[str], grant_type: str, wanted: bool) -> list[str]:
    """`grant_types` with `grant_type` added at the end, or without it."""
    kept = [g for g in grant_types if g != grant_type]
    return [*kept, grant_type] if wanted else kept
