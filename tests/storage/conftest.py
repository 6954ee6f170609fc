"""Repository tests: the functions of lbauth.storage.repo on a fresh migrated database (a SQLite
file and PostgreSQL, tests/conftest.py's `database_url`), records in and out, no HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from sqlalchemy import delete

from lbauth.storage.db import Database, open_database
from lbauth.storage.models import signing_keys
from lbauth.storage.records import App, ClientMetadata, Registration, User
from lbauth.storage.repo import apps as apps_repo
from lbauth.storage.repo import grants as grants_repo
from lbauth.storage.repo import users as users_repo
from tests.conftest import START_TIME

NOW = START_TIME


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    """This test's fresh database, opened, with no row at all: the records a test reads back are
    the ones it wrote (the other tests' databases start with an ID-token key)."""
    database = open_database(database_url)
    try:
        await database.transaction(lambda conn: conn.execute(delete(signing_keys)))
        yield database
    finally:
        await database.close()


def new_user(user_id: str = "usr_1", email: str = "ada@example.com") -> User:
    return User(id=user_id, email=email, name="Ada", avatar="", bio="", interest_tags=["math"],
                password_hash="$argon2id$not-a-real-hash", created_at=NOW, disabled_at=None, deleted_at=None,
                email_verified=False)


async def add_app(db: Database, owner: User, app_id: str = "app_1", client_id: str = "cid_1",
                  webhook_url: str | None = "https://hooks.example/lbauth") -> App:
    client = ClientMetadata(Registration.OPERATOR, name="Notes", redirect_uris=["https://app.example/cb"],
                            token_endpoint_auth_method="client_secret_basic", scopes=["userinfo", "profile"],
                            webhook_url=webhook_url, id_token_alg="RS256")
    await db.transaction(apps_repo.insert_app, client, app_id=app_id, client_id=client_id, owner_id=owner.id,
                         client_secret_hash="s" * 64, webhook_secret_sealed="mk1.sealed", now=NOW)
    app = await db.read(apps_repo.by_client_id, client_id)
    assert app is not None
    return app


@dataclass(frozen=True)
class Granted:
    """A user, an app, and the user's live grant to it with its app-scoped id."""
    user: User
    app: App
    grant_id: str
    asu: str


@pytest.fixture
async def granted(db: Database) -> Granted:
    user = new_user()
    await db.transaction(users_repo.insert_user, user)
    app = await add_app(db, user)
    await db.transaction(grants_repo.insert_grant, grant_id="gnt_1", app_id=app.id, user_id=user.id,
                         scopes=["userinfo"], now=NOW)
    await db.transaction(grants_repo.insert_subject, app_id=app.id, user_id=user.id, asu="asu_1", now=NOW)
    return Granted(user, app, "gnt_1", "asu_1")
