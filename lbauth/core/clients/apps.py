"""Registered applications (spec section 1, contract section 2): client credentials, redirect
URIs, allowed scopes, the revocation webhook. Secrets are shown once: the client secret is kept
only as a SHA-256 digest, the webhook secret only sealed under the master key."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lbauth.clock import Clock, iso
from lbauth.core import scopes, urls
from lbauth.core.crypto import opaque
from lbauth.core.crypto.keys import ID_TOKEN_DEFAULT_ALG
from lbauth.core.crypto.masterkey import MasterKeys
from lbauth.core.oauth.client_auth import PUBLIC_SECRET_DIGEST
from lbauth.core.oidc.id_tokens import ID_TOKEN_ALGS
from lbauth.errors import ApplicationNotFound, ValidationFailed
from lbauth.storage import Connection
from lbauth.storage.db import Database
from lbauth.storage.records import KEEP, PUBLIC_CLIENT_METHOD, App, AppChanges
from lbauth.storage.repo import apps as repo
from lbauth.storage.repo import users as users_repo


@dataclass(frozen=True)
class AppPolicy:
    """What the deployment allows in app settings."""
    development: bool


CONFIDENTIAL = "client_secret_basic"  # token_endpoint_auth_method (RFC 7591 2) of an operator's confidential app


def webhook_secret_purpose(app_id: str) -> str:
    return f"webhook_secret:{app_id}"


def view(app: App) -> dict[str, Any]:
    """An app as `apps show/list/update` and the console show it: no secret, ever."""
    return {"appId": app.id, "clientId": app.client_id, "name": app.name, "owner": app.owner_email,
            "redirectUris": list(app.redirect_uris), "scopes": list(app.scopes), "webhookUrl": app.webhook_url,
            "webhookEnabled": app.webhook_disabled_at is None, "idTokenAlg": app.id_token_alg,
            "postLogoutRedirectUris": list(app.post_logout_redirect_uris),
            "tokenEndpointAuthMethod": app.token_endpoint_auth_method,
            "createdAt": iso(app.created_at), "updatedAt": iso(app.updated_at)}


def _id_token_alg(alg: str) -> str:
    if alg not in ID_TOKEN_ALGS:
        raise ValidationFailed(f"the ID-token algorithm must be one of {', '.join(ID_TOKEN_ALGS)}")
    return alg


def _post_logout_uris(uris: Sequence[str], policy: AppPolicy) -> list[str]:
    """OpenID Connect RP-Initiated Logout 1.0 3.1: registered exactly, checked like redirect URIs."""
    return list(dict.fromkeys(urls.check_redirect_uri(u, development=policy.development) for u in uris))


def _redirect_uris(uris: Sequence[str], policy: AppPolicy) -> list[str]:
    checked = [urls.check_redirect_uri(u, development=policy.development) for u in uris]
    if not checked:
        raise ValidationFailed("an app needs at least one redirect URI")
    return list(dict.fromkeys(checked))


def _name(name: str) -> str:
    name = (name or "").strip()
    if not name or len(name) > 200:
        raise ValidationFailed("app name must be 1 to 200 characters")
    return name


async def create_app(db: Database, clock: Clock, keys: MasterKeys, policy: AppPolicy, *, name: str,
                     owner_email: str, redirect_uris: Sequence[str], allowed_scopes: Sequence[str] | None = None,
                     webhook_url: str | None = None, id_token_alg: str = ID_TOKEN_DEFAULT_ALG,
                     post_logout_redirect_uris: Sequence[str] = (), public: bool = False) -> dict[str, Any]:
    """Register an app; returns the contract's creation record with both secrets, shown this once.
    A public client (contract 17: `token_endpoint_auth_method` none) has no client secret:
    `clientSecret` is null, and it stores PUBLIC_SECRET_DIGEST, which no secret matches."""
    name = _name(name)
    uris = _redirect_uris(redirect_uris, policy)
    alg, logout_uris = _id_token_alg(id_token_alg), _post_logout_uris(post_logout_redirect_uris, policy)
    allowed = list(scopes.validate(allowed_scopes) if allowed_scopes else scopes.ALL)
    if webhook_url:
        webhook_url = urls.check_webhook_url(webhook_url, development=policy.development)
    app_id, client_id = opaque.new_id("app_"), opaque.new_id("cid_")
    client_secret = None if public else opaque.new_secret(opaque.CLIENT_SECRET)
    webhook_secret = opaque.new_secret(opaque.WEBHOOK_SECRET)
    now = int(clock.now())

    def work(conn: Connection) -> None:
        owner = users_repo.by_email(conn, (owner_email or "").strip().lower())
        if owner is None:
            raise ValidationFailed("the owner must be an existing user's email")
        repo.insert_app(conn, app_id=app_id, client_id=client_id, name=name, owner_id=owner.id,
                        client_secret_hash=PUBLIC_SECRET_DIGEST if client_secret is None
                        else opaque.digest(client_secret), redirect_uris=uris, scopes=allowed,
                        webhook_url=webhook_url or None,
                        webhook_secret_sealed=keys.seal(webhook_secret.encode(), webhook_secret_purpose(app_id)),
                        now=now, id_token_alg=alg, post_logout_redirect_uris=logout_uris,
                        token_endpoint_auth_method=PUBLIC_CLIENT_METHOD if public else CONFIDENTIAL)

    await db.transaction(work)
    return {"appId": app_id, "clientId": client_id, "clientSecret": client_secret, "webhookSecret": webhook_secret,
            "redirectUris": uris, "scopes": allowed, "webhookUrl": webhook_url or None}


async def get_app(db: Database, client_id: str) -> App:
    app = await db.read(repo.by_client_id, client_id) if isinstance(client_id, str) else None
    if app is None:
        raise ApplicationNotFound()
    return app


async def list_apps(db: Database, owner_id: str | None = None) -> list[dict[str, Any]]:
    return [view(app) for app in await db.read(repo.all_apps, owner_id)]


async def update_app(db: Database, clock: Clock, policy: AppPolicy, client_id: str, *, name: str | None = None,
                     redirect_uris: Sequence[str] | None = None, allowed_scopes: Sequence[str] | None = None,
                     webhook_url: str | None = None, enable_webhook: bool = False, id_token_alg: str | None = None,
                     post_logout_redirect_uris: Sequence[str] | None = None) -> dict[str, Any]:
    """Change what is given; `webhook_url=""` removes the webhook."""
    checked_name = _name(name) if name is not None else None
    uris = _redirect_uris(redirect_uris, policy) if redirect_uris is not None else None
    allowed = (list(scopes.validate(allowed_scopes)) or list(scopes.ALL)) if allowed_scopes is not None else None
    new_url = KEEP if webhook_url is None else \
        urls.check_webhook_url(webhook_url, development=policy.development) if webhook_url else None
    changes = AppChanges(name=checked_name, redirect_uris=uris, scopes=allowed, webhook_url=new_url,
                         webhook_disabled_at=None if webhook_url is not None or enable_webhook else KEEP,
                         id_token_alg=_id_token_alg(id_token_alg) if id_token_alg is not None else None,
                         post_logout_redirect_uris=_post_logout_uris(post_logout_redirect_uris, policy)
                         if post_logout_redirect_uris is not None else None)
    return await _change(db, clock, client_id, changes)


async def rotate_client_secret(db: Database, clock: Clock, client_id: str) -> dict[str, Any]:
    """A confidential app's new secret; a public client has none to rotate (contract 17). Whether
    an app is public never changes, so it is checked before the change."""
    if (await get_app(db, client_id)).public:
        raise ValidationFailed("This app is a public client: it has no client secret to rotate.")
    secret = opaque.new_secret(opaque.CLIENT_SECRET)
    await _change(db, clock, client_id, AppChanges(client_secret_hash=opaque.digest(secret)))
    return {"clientId": client_id, "clientSecret": secret}


async def rotate_webhook_secret(db: Database, clock: Clock, keys: MasterKeys, client_id: str) -> dict[str, Any]:
    secret = opaque.new_secret(opaque.WEBHOOK_SECRET)
    app = await get_app(db, client_id)
    await _change(db, clock, client_id,
                  AppChanges(webhook_secret_sealed=keys.seal(secret.encode(), webhook_secret_purpose(app.id))))
    return {"clientId": client_id, "webhookSecret": secret}


async def _change(db: Database, clock: Clock, client_id: str, changes: AppChanges) -> dict[str, Any]:
    def work(conn: Connection) -> App:
        app = repo.by_client_id(conn, client_id)
        if app is None:
            raise ApplicationNotFound()
        repo.update_app(conn, app.id, changes, int(clock.now()))
        changed = repo.by_client_id(conn, client_id)
        assert changed is not None  # in this transaction, since the read above
        return changed
    return view(await db.transaction(work))
