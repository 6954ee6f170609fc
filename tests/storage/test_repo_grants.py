"""Grants, app-scoped ids and refresh tokens (spec section 3, contract sections 6 and 7): one live
grant per user and app, revoked once; a refresh token found only by its own client."""

from __future__ import annotations

import pytest

from lbauth.storage import Duplicate
from lbauth.storage.db import Database
from lbauth.storage.records import Authentication, Grant, RefreshToken, UserGrant
from lbauth.storage.repo import codes as codes_repo
from lbauth.storage.repo import grants as grants_repo
from lbauth.storage.repo import tokens as tokens_repo
from tests.storage.conftest import NOW, Granted, add_app


async def test_the_live_grant_with_its_app_scoped_id(db: Database, granted: Granted) -> None:
    grant = await db.read(grants_repo.live_grant, granted.user.id, granted.app.id)
    assert grant == Grant(id=granted.grant_id, app_id=granted.app.id, user_id=granted.user.id, scopes=["userinfo"],
                          created_at=NOW, updated_at=NOW, revoked_at=None, resources=[], asu=granted.asu)
    await db.transaction(grants_repo.set_scopes, granted.grant_id, ["userinfo", "profile"], NOW + 5)
    grant = await db.read(grants_repo.live_grant, granted.user.id, granted.app.id)
    assert grant is not None and (grant.scopes, grant.updated_at) == (["userinfo", "profile"], NOW + 5)
    assert await db.read(grants_repo.subject, granted.user.id, granted.app.id) == granted.asu
    assert await db.read(grants_repo.live_grants_of_user, granted.user.id) == [
        UserGrant(id=granted.grant_id, app_id=granted.app.id, user_id=granted.user.id,
                  scopes=["userinfo", "profile"], created_at=NOW, updated_at=NOW + 5, revoked_at=None, resources=[],
                  client_id=granted.app.client_id, app_name="Notes")]


async def test_a_second_live_grant_or_subject_is_a_duplicate(db: Database, granted: Granted) -> None:
    with pytest.raises(Duplicate):
        await db.transaction(grants_repo.insert_grant, grant_id="gnt_2", app_id=granted.app.id,
                             user_id=granted.user.id, scopes=["profile"], now=NOW)
    with pytest.raises(Duplicate):
        await db.transaction(grants_repo.insert_subject, app_id=granted.app.id, user_id=granted.user.id,
                             asu="asu_2", now=NOW)
    assert [g.id for g in await db.read(grants_repo.live_grants_of_user, granted.user.id)] == [granted.grant_id]


async def test_a_grant_is_revoked_once_and_a_new_one_may_follow(db: Database, granted: Granted) -> None:
    assert await db.transaction(grants_repo.revoke_grant, granted.grant_id, NOW + 1) is True
    assert await db.transaction(grants_repo.revoke_grant, granted.grant_id, NOW + 2) is False
    assert await db.read(grants_repo.live_grant, granted.user.id, granted.app.id) is None
    assert await db.read(grants_repo.live_grants_of_user, granted.user.id) == []

    await db.transaction(grants_repo.insert_grant, grant_id="gnt_2", app_id=granted.app.id, user_id=granted.user.id,
                         scopes=["profile"], now=NOW + 3)
    grant = await db.read(grants_repo.live_grant, granted.user.id, granted.app.id)
    assert grant is not None and (grant.id, grant.asu) == ("gnt_2", granted.asu)  # the same app-scoped id


async def _store_refresh_token(db: Database, granted: Granted, token_hash: str, code_hash: str) -> None:
    await db.transaction(codes_repo.insert_code, code_hash=code_hash, app_id=granted.app.id,
                         user_id=granted.user.id, grant_id=granted.grant_id, asu=granted.asu,
                         redirect_uri="https://app.example/cb", scopes=["userinfo"], code_challenge=None, now=NOW,
                         expires_at=NOW + 300, authentication=Authentication(auth_time=NOW, amr="pwd"))
    claimed = await db.transaction(codes_repo.redeem, code_hash=code_hash, client_id=granted.app.client_id,
                                   client_secret_hash=granted.app.client_secret_hash,
                                   redirect_uri="https://app.example/cb", challenge=None, now=NOW, access_jti="j",
                                   refresh_hash=token_hash, refresh_expires_at=NOW + 3600)
    assert claimed is not None


async def test_a_refresh_token_is_found_only_by_its_own_client(db: Database, granted: Granted) -> None:
    await _store_refresh_token(db, granted, "r" * 64, "c" * 64)
    other = await add_app(db, granted.user, app_id="app_2", client_id="cid_2")

    found = await db.read(tokens_repo.for_client, "r" * 64, granted.app.client_id, granted.app.client_secret_hash)
    assert isinstance(found, RefreshToken)
    assert (found.app_id, found.grant_id, found.asu, found.scopes) == (granted.app.id, granted.grant_id,
                                                                       granted.asu, ["userinfo"])
    assert await db.read(tokens_repo.for_client, "r" * 64, granted.app.client_id, "x" * 64) is None
    assert await db.read(tokens_repo.for_client, "r" * 64, other.client_id, other.client_secret_hash) is None
    assert await db.read(tokens_repo.for_client, "n" * 64, granted.app.client_id,
                         granted.app.client_secret_hash) is None


async def test_refresh_tokens_are_revoked_one_by_code_or_by_grant(db: Database, granted: Granted) -> None:
    for token, code in (("r" * 64, "c" * 64), ("s" * 64, "d" * 64), ("t" * 64, "e" * 64)):
        await _store_refresh_token(db, granted, token, code)

    async def revoked_at(token_hash: str) -> int | None:
        token = await db.read(tokens_repo.by_hash, token_hash)
        assert token is not None
        return token.revoked_at

    await db.transaction(tokens_repo.revoke_one, "r" * 64, NOW + 1)
    await db.transaction(tokens_repo.revoke_from_code, "d" * 64, NOW + 2)
    assert [await revoked_at(t * 64) for t in "rst"] == [NOW + 1, NOW + 2, None]
    await db.transaction(tokens_repo.revoke_for_grant, granted.grant_id, NOW + 3)
    assert [await revoked_at(t * 64) for t in "rst"] == [NOW + 1, NOW + 2, NOW + 3]  # the first time stays
