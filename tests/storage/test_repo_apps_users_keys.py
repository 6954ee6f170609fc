"""Users, apps and signing keys as records: what is stored is what is read back; a change writes
only what it names; a concurrent writer's row is a Duplicate."""

from __future__ import annotations

import pytest

from lbauth.storage import Connection, Duplicate
from lbauth.storage.db import Database
from lbauth.storage.records import KEEP, AppChanges, Session, SigningKey
from lbauth.storage.repo import apps as apps_repo
from lbauth.storage.repo import keys as keys_repo
from lbauth.storage.repo import sessions as sessions_repo
from lbauth.storage.repo import users as users_repo
from tests.storage.conftest import NOW, add_app, new_user


async def test_users_and_their_sessions(db: Database) -> None:
    user = new_user()
    await db.transaction(users_repo.insert_user, user)
    with pytest.raises(Duplicate):
        await db.transaction(users_repo.insert_user, new_user(user_id="usr_2"))  # the same email

    assert await db.read(users_repo.by_email, user.email) == user
    assert await db.read(users_repo.by_id, user.id) == user
    assert await db.read(users_repo.by_id, "usr_2") is None
    session = Session(id="ses_1", token_hash="u" * 64, user_id=user.id, kind="api", created_at=NOW,
                      last_used_at=NOW, expires_at=NOW + 60, ended_at=None, user_agent="curl/8", ip_address="::1",
                      authenticated_at=NOW)
    await db.transaction(sessions_repo.insert_session, session)
    assert await db.read(sessions_repo.with_user, "u" * 64) == (session, user)
    assert await db.read(sessions_repo.live_of_user, user.id, NOW + 59) == [session]
    assert await db.read(sessions_repo.live_of_user, user.id, NOW + 60) == []  # expired

    await db.transaction(sessions_repo.touch, "ses_1", NOW + 30, 60)  # used within the minute: not written
    assert (await db.read(sessions_repo.with_user, "u" * 64))[0].last_used_at == NOW
    await db.transaction(sessions_repo.touch, "ses_1", NOW + 60, 60)
    assert (await db.read(sessions_repo.with_user, "u" * 64))[0].last_used_at == NOW + 60

    assert await db.transaction(sessions_repo.end, ["ses_1"], NOW + 1) == ["ses_1"]
    assert await db.transaction(sessions_repo.end, ["ses_1"], NOW + 2) == []  # already ended
    assert (await db.read(sessions_repo.with_user, "u" * 64))[0].ended_at == NOW + 1
    assert await db.read(sessions_repo.live_ids, user.id, NOW + 2) == []


async def test_an_erased_user_keeps_only_its_id_and_frees_the_email(db: Database) -> None:
    user = new_user()
    await db.transaction(users_repo.insert_user, user)
    assert await db.transaction(users_repo.erase, user.id, NOW + 5)
    assert not await db.transaction(users_repo.erase, user.id, NOW + 6)  # once
    erased = await db.read(users_repo.by_id, user.id)
    assert (erased.name, erased.avatar, erased.bio, erased.interest_tags, erased.password_hash) == ("", "", "", [], "")
    assert erased.email == f"{user.id}@deleted.invalid" and erased.deleted_at == NOW + 5 and not erased.active
    await db.transaction(users_repo.insert_user, new_user(user_id="usr_2"))  # the email is free again
    assert [u.id for u in await db.read(users_repo.listed)] == ["usr_2"]


async def test_an_app_change_writes_only_what_it_names(db: Database) -> None:
    owner = new_user()
    await db.transaction(users_repo.insert_user, owner)
    app = await add_app(db, owner)
    assert (app.owner_email, app.redirect_uris, app.webhook_disabled_at) == (owner.email, ["https://app.example/cb"],
                                                                             None)

    await db.transaction(apps_repo.update_app, app.id, AppChanges(webhook_disabled_at=NOW + 1), NOW + 1)
    await db.transaction(apps_repo.update_app, app.id, AppChanges(name="Notes 2", client_secret_hash="t" * 64), NOW + 2)
    await db.transaction(apps_repo.update_app, app.id, AppChanges(), NOW + 3)  # nothing: not even updated_at
    changed = await db.read(apps_repo.by_client_id, app.client_id)
    assert changed is not None
    assert (changed.name, changed.client_secret_hash, changed.webhook_disabled_at, changed.updated_at) == (
        "Notes 2", "t" * 64, NOW + 1, NOW + 2)
    assert (changed.webhook_url, changed.scopes) == (app.webhook_url, app.scopes)

    await db.transaction(apps_repo.update_app, app.id, AppChanges(webhook_url=None, webhook_disabled_at=None), NOW + 4)
    removed = await db.read(apps_repo.by_client_id, app.client_id)
    assert removed is not None and (removed.webhook_url, removed.webhook_disabled_at) == (None, None)
    assert AppChanges(webhook_url=KEEP).columns() == {}
    assert await db.read(apps_repo.all_apps, owner.id) == [removed]
    assert await db.read(apps_repo.all_apps, "usr_nobody") == []


def _key(kid: str, state: str, created_at: int) -> SigningKey:
    return SigningKey(kid=kid, alg="ES256", state=state, public_jwk={"kty": "EC", "kid": kid},
                      private_key_sealed=f"mk1.{kid}", created_at=created_at,
                      activated_at=created_at if state == "active" else None, deactivated_at=None, retired_at=None)


async def test_signing_keys_through_their_states(db: Database) -> None:
    await db.transaction(keys_repo.insert_key, _key("k1", "active", NOW))
    with pytest.raises(Duplicate):  # one active key at a time
        await db.transaction(keys_repo.insert_key, _key("k2", "active", NOW + 1))
    await db.transaction(keys_repo.insert_key, _key("k0", "staged", NOW - 5))

    assert [k.kid for k in await db.read(keys_repo.published)] == ["k1", "k0"]  # the signing key first

    def promote(conn: Connection) -> None:
        keys_repo.deactivate(conn, "k1", NOW + 10)
        keys_repo.activate(conn, "k0", NOW + 10)
    await db.transaction(promote)
    await db.transaction(keys_repo.retire, "k1", NOW + 20)

    assert await db.read(keys_repo.published) == [
        SigningKey(kid="k0", alg="ES256", state="active", public_jwk={"kty": "EC", "kid": "k0"},
                   private_key_sealed="mk1.k0", created_at=NOW - 5, activated_at=NOW + 10, deactivated_at=None,
                   retired_at=None)]
    retired = (await db.read(keys_repo.all_keys))[1]
    assert (retired.kid, retired.state, retired.deactivated_at, retired.retired_at) == ("k1", "retired", NOW + 10,
                                                                                        NOW + 20)


async def test_sealed_values_are_read_and_stored_again(db: Database) -> None:
    owner = new_user()
    await db.transaction(users_repo.insert_user, owner)
    app = await add_app(db, owner)
    await db.transaction(keys_repo.insert_key, _key("k1", "active", NOW))

    assert await db.read(apps_repo.webhook_secrets) == [(app.id, "mk1.sealed")]
    assert await db.read(keys_repo.private_keys) == [("k1", "mk1.k1")]
    await db.transaction(apps_repo.reseal_webhook_secret, app.id, "mk2.sealed")
    await db.transaction(keys_repo.reseal_private_key, "k1", "mk2.k1")
    resealed = await db.read(apps_repo.by_client_id, app.client_id)
    assert resealed is not None and (resealed.webhook_secret_sealed, resealed.updated_at) == ("mk2.sealed", NOW)
    assert await db.read(keys_repo.private_keys) == [("k1", "mk2.k1")]
