"""The demo user and app that `make run` creates on first start, so a newcomer can try the whole
flow at once. Their secrets are printed the one time they are created and never stored in clear."""

from __future__ import annotations

import secrets
from urllib.parse import urlencode

from lbauth.clock import Clock
from lbauth.core.accounts import passwords, users
from lbauth.core.clients import apps
from lbauth.core.crypto.masterkey import MasterKeys
from lbauth.settings import Settings
from lbauth.storage.db import Database
from lbauth.storage.repo import apps as apps_repo
from lbauth.storage.repo import users as users_repo

DEMO_EMAIL = "demo@example.com"
DEMO_APP = "Demo App"
DEMO_REDIRECT_URI = "http://localhost:8080/callback"


def authorize_url(settings: Settings, client_id: str) -> str:
    query = urlencode({"client_id": client_id, "redirect_uri": DEMO_REDIRECT_URI, "response_type": "code",
                       "scope": "userinfo", "state": secrets.token_urlsafe(8)})
    return f"{settings.auth_url}/oauth/?{query}"


async def ensure_demo(db: Database, clock: Clock, master_keys: MasterKeys, settings: Settings) -> dict:
    """Create what is missing; the result names every secret it created, and only those."""
    result: dict = {"email": DEMO_EMAIL}
    user = await db.read(users_repo.by_email, DEMO_EMAIL)
    if user is None:
        password = secrets.token_urlsafe(12)
        while passwords.weakness(password, DEMO_EMAIL, "Demo User"):  # "demo" or "user" by chance
            password = secrets.token_urlsafe(12)
        await users.create_user(db, clock, email=DEMO_EMAIL, name="Demo User", password=password,
                                bio="A user made by `make run`.", interest_tags=["demo"], email_verified=True,
                                cost=settings.argon2)
        result["password"] = password
        user = await db.read(users_repo.by_email, DEMO_EMAIL)
    app = next((a for a in await db.read(apps_repo.all_apps, user.id) if a.name == DEMO_APP), None)
    if app is None:
        operator = apps.Apps(db, clock, lambda: master_keys, apps.AppPolicy(development=True))
        created = await operator.create(name=DEMO_APP, owner_email=DEMO_EMAIL, redirect_uris=[DEMO_REDIRECT_URI])
        result.update(clientId=created.client_id, clientSecret=created.client_secret,
                      webhookSecret=created.webhook_secret)
    else:
        result["clientId"] = app.client_id
    result["redirectUri"] = DEMO_REDIRECT_URI
    result["authorizeUrl"] = authorize_url(settings, result["clientId"])
    if settings.signup_open:
        result["signupUrl"] = f"{settings.auth_url}/signup"
        if not settings.smtp_url:  # development without SMTP: .eml files, and the links in the log
            result["mailDir"] = str(settings.data_dir / "mail")
    return result


def describe(result: dict) -> str:
    """What `make run` prints: the secrets when just created, else where to get new ones."""
    lines = ["", "lbauth demo", "-----------"]
    if "password" in result:
        lines.append(f"demo user      {result['email']}  password: {result['password']}")
    else:
        lines.append(f"demo user      {result['email']}  (password shown when it was created)")
    lines.append(f"demo app       client_id: {result['clientId']}")
    if "clientSecret" in result:
        lines.append(f"               client_secret: {result['clientSecret']}")
        lines.append(f"               webhook secret: {result['webhookSecret']}")
        lines.append("               (secrets are shown this once; save them now)")
    else:
        lines.append(f"               secret shown when it was created; new one: lbauth apps rotate-secret "
                     f"{result['clientId']}")
    lines.append(f"redirect URI   {result['redirectUri']}")
    lines.append(f"open           {result['authorizeUrl']}")
    if "signupUrl" in result:
        lines.append(f"sign up        {result['signupUrl']}")
        if "mailDir" in result:
            lines.append("               no SMTP server: each message's link is printed in the server's log below, "
                         f"and the message saved under {result['mailDir']}")
    lines.append("")
    return "\n".join(lines)
