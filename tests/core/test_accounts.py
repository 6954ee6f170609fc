"""The account use cases (lbauth/core/accounts, contract sections 4 and 16) without HTTP: creating
users, passwords, signing in, the profile and the fields its validation names, sessions (listed,
ended, expired by moving the frozen clock), and what operators do to accounts; on a fresh SQLite
file and PostgreSQL database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lbauth import errors
from lbauth.clock import FrozenClock
from lbauth.core.accounts import passwords, users
from lbauth.core.accounts.accounts import Accounts, AccountStatus
from lbauth.core.accounts.sessions import API, BROWSER, SignedIn
from lbauth.core.audit import Source
from lbauth.server import build_services
from lbauth.services import Services
from lbauth.storage.records import User
from lbauth.storage.repo import grants as grants_repo
from lbauth.storage.repo import users as users_repo
from tests.conftest import START_TIME, make_settings

PASSWORD = "correct horse battery"
TTL = 3600


@pytest.fixture
async def services(tmp_path: Path, database_url: str) -> AsyncIterator[Services]:
    built = await build_services(make_settings(tmp_path, database_url, user_token_ttl=TTL), FrozenClock(START_TIME),
                                 announce=False)
    try:
        yield built
    finally:
        await built.db.close()


@pytest.fixture
def accounts(services: Services) -> Accounts:
    return services.accounts


@pytest.fixture
def clock(services: Services) -> FrozenClock:
    assert isinstance(services.clock, FrozenClock)
    return services.clock


@pytest.fixture
async def ada(services: Services) -> User:
    return await users.create_user(services.db, services.clock, email=" Ada@Example.com ", name="  Ada  ",
                                   password=PASSWORD, interest_tags=["math", " poetry "])


async def signed_in(accounts: Accounts, user: User, password: str = PASSWORD, kind: str = API,
                    user_agent: str = "") -> tuple[str, SignedIn]:
    new = await accounts.sign_in(user.email, password, kind=kind, source=Source("127.0.0.1", user_agent))
    return new.token, await accounts.sessions.check(new.token, kind=kind)


# ---- passwords (contract 3: account.password.weak) ---------------------------------------------------------

SHORT, LONG = "The password must be at least 10 characters.", "The password must be at most 256 characters."
EMAIL = "This password contains your email address or part of it; choose another."
NAME = "This password contains your name or part of it; choose another."
BREACHED = "This password is in a list of passwords exposed in data breaches; choose another."


@pytest.mark.parametrize(("password", "reason"), [
    ("short-one", SHORT),  # 9 characters
    ("long-enough", None),
    ("p" * 256, None),
    ("p" * 257, LONG),
    ("Ada@Example.com", EMAIL),  # letter case aside
    (" ada@example.com ", EMAIL),
])
def test_a_password_is_weak_outside_10_to_256_characters_or_when_it_is_the_email(password, reason):
    assert passwords.weakness(password, "ada@example.com") == reason


@pytest.mark.parametrize(("password", "email", "name", "reason"), [
    # the email's local part, whole and in pieces split at anything but letters and digits
    ("my ADA.LOVELACE pw", "ada.lovelace@example.com", "", EMAIL),
    ("i love lovelace!", "ada.lovelace+lbauth@example.com", "", EMAIL),
    ("lbauth is my password", "ada.lovelace+lbauth@example.com", "", EMAIL),
    ("call jo.li at six", "jo.li@example.com", "", EMAIL),  # the whole local part counts
    ("jolly lions roar", "jo.li@example.com", "", None),  # its pieces "jo" and "li" are too short
    ("adaaaaaaaaaaa", "ad-a@example.com", "", None),  # pieces "ad" and "a" are too short to count
    ("the example.com domain", "ada@example.com", "", None),  # the domain alone is not personal
    # the name: spaces removed, each word, three characters or more
    ("Ada Lovelace 1815!", "a1@example.com", "Ada Lovelace", NAME),
    ("adalovelace-1815", "a1@example.com", "Ada Lovelace", NAME),
    ("countess lovelace", "a1@example.com", "Ada Lovelace", NAME),
    ("xada-is-here-now", "a1@example.com", "Ada", NAME),
    ("jean lives at home", "a1@example.com", "Jean-Luc Picard", NAME),
    ("JEAN-LUCPICARD!", "a1@example.com", "Jean-Luc Picard", NAME),
    ("linaria vulgaris", "a1@example.com", "Li Na", NAME),  # "lina": the name without its space
    ("alpine lake view", "a1@example.com", "Al", None),  # a two-letter name forbids nothing
    ("zoë the explorer", "a1@example.com", "Zoë", NAME),
    ("the quiet harbour", "a1@example.com", "", None),
    # the breached list (exact matches, checked after the cheaper rules)
    ("password1234", "a1@example.com", "", BREACHED),
    ("qwertyuiop", "a1@example.com", "", BREACHED),
    ("qwertyuiop", "qwerty@example.com", "", EMAIL),
    # a lone surrogate (or a byte that is not UTF-8, in a command's argument) cannot be hashed or stored
    ("\udfffabcdefghijk", "a1@example.com", "", "The password holds something that is not text "
                                                  "(invalid UTF-8 or a lone surrogate); choose another."),
])
def test_a_password_holding_the_email_or_name_or_a_breached_one_is_weak(password, email, name, reason):
    assert passwords.weakness(password, email, name) == reason


async def test_a_password_verifies_against_its_hash_only():
    stored = await passwords.hash_password(PASSWORD)
    assert stored.startswith("$argon2id$") and PASSWORD not in stored
    assert await passwords.verify_password(stored, PASSWORD)
    assert not await passwords.verify_password(stored, PASSWORD + "!")


@pytest.mark.parametrize("stored", [None, ""])  # an unknown email; an erased account
async def test_no_stored_hash_verifies_no_password(stored):
    assert not await passwords.verify_password(stored, PASSWORD)


# ---- creating users ----------------------------------------------------------------------------------------

async def test_a_new_user_is_a_record_with_its_email_normalized_and_its_name_trimmed(ada):
    assert (ada.email, ada.name, ada.interest_tags) == ("ada@example.com", "Ada", ["math", "poetry"])
    assert ada.id.startswith("usr_") and ada.created_at == START_TIME and ada.active
    assert ada.password_hash.startswith("$argon2id$")


@pytest.mark.parametrize(("fields", "refused"), [
    ({"email": "not-an-email"}, "email"),
    ({"name": "   "}, "name"),
    ({"avatar": "ftp://img.example/a.png"}, "avatar"),
])
async def test_a_refused_new_user_names_the_field(services, fields, refused):
    given = {"email": "grace@example.com", "name": "Grace", "password": PASSWORD, **fields}
    with pytest.raises(errors.ValidationFailed) as refusal:
        await users.create_user(services.db, services.clock, **given)
    assert refusal.value.field == refused
    assert refusal.value.message.startswith(refused + " ")


async def test_a_new_user_with_a_weak_password_is_refused_saying_why(services):
    with pytest.raises(errors.PasswordWeak, match="at least 10 characters"):
        await users.create_user(services.db, services.clock, email="grace@example.com", name="Grace", password="short")
    assert await services.db.read(users_repo.by_email, "grace@example.com") is None


async def test_an_email_is_taken_once(services, ada):
    with pytest.raises(errors.Conflict):
        await users.create_user(services.db, services.clock, email="ADA@example.com", name="Ada", password=PASSWORD)


# ---- signing in ----------------------------------------------------------------------------------------------

async def test_signing_in_opens_a_session_its_token_proves(accounts, ada):
    new = await accounts.sign_in("ADA@example.com", PASSWORD, kind=BROWSER, source=Source("::1", "x" * 300))
    assert new.token.startswith("lba_ut_") and new.expires_in == TTL
    me = await accounts.sessions.check(new.token, kind=BROWSER)
    assert (me.user.id, me.session.id, me.session.kind) == (ada.id, new.session_id, BROWSER)
    with pytest.raises(errors.TokenInvalid):  # a browser session's credential is no API user token
        await accounts.sessions.check(new.token)
    assert (len(me.session.user_agent), me.session.ip_address) == (200, "::1")
    assert me.session.expires_at == START_TIME + TTL


@pytest.mark.parametrize(("email", "password"), [
    ("ada@example.com", "wrong password"),
    ("nobody@example.com", PASSWORD),
    ("not an email", PASSWORD),
])
async def test_a_wrong_email_or_password_is_the_same_refusal(accounts, ada, email, password):
    with pytest.raises(errors.LoginFailed) as refusal:
        await accounts.sign_in(email, password, kind=API)
    assert refusal.value.message == errors.LoginFailed.message


async def test_a_token_that_is_not_a_user_token_is_invalid(accounts):
    with pytest.raises(errors.TokenInvalid):
        await accounts.sessions.check("lba_at_something")
    with pytest.raises(errors.TokenInvalid):
        await accounts.sessions.check("lba_ut_unknown")


# ---- the profile ---------------------------------------------------------------------------------------------

async def test_a_profile_change_returns_the_changed_user_and_keeps_the_rest(accounts, ada):
    changed = await accounts.update_profile(ada, {"name": "  Ada King ", "interest_tags": ["a", " b", "a"]})
    assert (changed.name, changed.interest_tags) == ("Ada King", ["a", "b"])
    assert (changed.id, changed.email, changed.avatar, changed.bio) == (ada.id, ada.email, ada.avatar, ada.bio)
    assert (await accounts.user(ada.id)).name == "Ada King"  # this process forgot its cached row


@pytest.mark.parametrize(("changes", "refused"), [
    ({"name": ""}, "name"),
    ({"name": None}, "name"),  # null is not "unchanged"
    ({"name": "n" * 201}, "name"),
    ({"avatar": "javascript:alert(1)"}, "avatar"),
    ({"avatar": "https://img.example/" + "a" * 2048}, "avatar"),
    ({"bio": "b" * 2001}, "bio"),
    ({"bio": 7}, "bio"),
    ({"interest_tags": "math"}, "interest_tags"),
    ({"interest_tags": ["t"] * 21}, "interest_tags"),
    ({"interest_tags": ["t" * 41]}, "interest_tags"),
    ({"interest_tags": ["  "]}, "interest_tags"),
])
async def test_a_refused_profile_change_names_the_field_and_changes_nothing(accounts, ada, changes, refused):
    with pytest.raises(errors.ValidationFailed) as refusal:
        await accounts.update_profile(ada, changes)
    assert refusal.value.field == refused
    assert (await accounts.user(ada.id)) == ada


async def test_an_empty_avatar_clears_it(accounts, ada):
    with_avatar = await accounts.update_profile(ada, {"avatar": "https://img.example/ada.png"})
    assert with_avatar.avatar == "https://img.example/ada.png"
    assert (await accounts.update_profile(with_avatar, {"avatar": ""})).avatar == ""


# ---- the password --------------------------------------------------------------------------------------------

async def test_a_new_password_ends_every_other_session(accounts, ada):
    _, other = await signed_in(accounts, ada)
    token, me = await signed_in(accounts, ada)
    assert await accounts.change_password(me, PASSWORD, "a much better password") == 1
    assert (await accounts.sessions.check(token)).session.id == me.session.id
    with pytest.raises(errors.LoginFailed):
        await accounts.sign_in(ada.email, PASSWORD, kind=API)
    await signed_in(accounts, ada, "a much better password")
    listed = [item.session.id for item in await accounts.sessions.listed(ada.id, me.session.id)]
    assert other.session.id not in listed and me.session.id in listed


async def test_a_password_change_needs_the_current_one_then_a_strong_one(accounts, ada):
    _, me = await signed_in(accounts, ada)
    with pytest.raises(errors.LoginFailed, match="current password"):
        await accounts.change_password(me, "not it", "a much better password")
    for weak in ("too-short", "ADA@example.com"):
        with pytest.raises(errors.PasswordWeak):
            await accounts.change_password(me, PASSWORD, weak)
    await signed_in(accounts, ada)  # unchanged


# ---- sessions ------------------------------------------------------------------------------------------------

async def test_sessions_are_listed_most_recently_used_first_with_the_current_one_marked(accounts, clock, ada):
    _, first = await signed_in(accounts, ada, user_agent="first")
    clock.advance(120)
    _, second = await signed_in(accounts, ada, kind=BROWSER, user_agent="second")
    listed = await accounts.sessions.listed(ada.id, first.session.id)
    assert [(item.session.user_agent, item.current) for item in listed] == [("second", False), ("first", True)]
    assert listed[0].session.kind == BROWSER and listed[0].session.created_at == START_TIME + 120


async def test_last_used_is_written_at_most_once_a_minute(accounts, clock, ada):
    token, me = await signed_in(accounts, ada)
    clock.advance(59)
    await accounts.sessions.check(token)
    [listed] = await accounts.sessions.listed(ada.id, me.session.id)
    assert listed.session.last_used_at == START_TIME
    clock.advance(1)
    await accounts.sessions.check(token)
    [listed] = await accounts.sessions.listed(ada.id, me.session.id)
    assert listed.session.last_used_at == START_TIME + 60


async def test_ending_a_session_refuses_its_token_and_unlists_it(accounts, clock, ada):
    token, me = await signed_in(accounts, ada)
    _, other = await signed_in(accounts, ada)
    clock.advance(5)
    ended = await accounts.sessions.end(ada.id, me.session.id)
    assert (ended.session_id, ended.ended_at) == (me.session.id, START_TIME + 5)
    with pytest.raises(errors.TokenRevoked):
        await accounts.sessions.check(token)
    assert [item.session.id for item in await accounts.sessions.listed(ada.id, None)] == [other.session.id]
    with pytest.raises(errors.SessionNotFound):  # already ended
        await accounts.sessions.end(ada.id, me.session.id)


async def test_another_users_session_is_not_found_and_stays_live(services, accounts, ada):
    grace = await users.create_user(services.db, services.clock, email="grace@example.com", name="Grace",
                                    password=PASSWORD)
    token, theirs = await signed_in(accounts, grace)
    with pytest.raises(errors.SessionNotFound):
        await accounts.sessions.end(ada.id, theirs.session.id)
    assert (await accounts.sessions.check(token)).user.id == grace.id


async def test_signing_out_and_ending_the_others(accounts, ada):
    tokens = [(await signed_in(accounts, ada))[0] for _ in range(3)]
    me = await accounts.sessions.check(tokens[0])
    assert await accounts.sessions.end_others(ada.id, me.session.id) == 2
    assert await accounts.sessions.end_others(ada.id, me.session.id) == 0
    assert (await accounts.sign_out(me)).session_id == me.session.id
    assert await accounts.sessions.listed(ada.id, None) == []
    for token in tokens:
        with pytest.raises(errors.TokenRevoked):
            await accounts.sessions.check(token)


async def test_a_session_expires_with_the_clock(accounts, clock, ada):
    token, me = await signed_in(accounts, ada)
    clock.advance(TTL - 1)
    assert (await accounts.sessions.check(token)).session.id == me.session.id
    clock.advance(1)
    with pytest.raises(errors.TokenExpired):
        await accounts.sessions.check(token)
    assert await accounts.sessions.listed(ada.id, me.session.id) == []
    with pytest.raises(errors.SessionNotFound):
        await accounts.sessions.end(ada.id, me.session.id)


# ---- operators and leaving -----------------------------------------------------------------------------------

async def test_users_are_listed_oldest_first(services, accounts, clock, ada):
    clock.advance(10)
    grace = await users.create_user(services.db, services.clock, email="grace@example.com", name="Grace",
                                    password=PASSWORD)
    assert [user.id for user in await accounts.list_users()] == [ada.id, grace.id]


async def test_disabling_ends_sessions_and_sign_in_until_enabled(accounts, clock, ada):
    token, _ = await signed_in(accounts, ada)
    change = await accounts.disable("ADA@example.com")
    assert (change.user_id, change.email, change.status) == (ada.id, ada.email, AccountStatus.DISABLED)
    with pytest.raises(errors.TokenRevoked):
        await accounts.sessions.check(token)
    with pytest.raises(errors.LoginFailed):
        await signed_in(accounts, ada)
    assert await accounts.user(ada.id) is None
    [listed] = await accounts.list_users()
    assert listed.disabled_at == START_TIME
    assert (await accounts.enable(ada.email)).status == AccountStatus.ENABLED
    await signed_in(accounts, ada)
    assert (await accounts.user(ada.id)).active


async def test_deleting_revokes_grants_ends_sessions_erases_and_frees_the_email(services, accounts, clock, ada):
    app = await services.apps.create(name="App", owner_email=ada.email, redirect_uris=["https://app.example/callback"])
    await services.db.transaction(grants_repo.insert_grant, grant_id="gnt_ada", app_id=app.app_id, user_id=ada.id,
                                  scopes=["userinfo"], now=START_TIME)
    await services.db.transaction(grants_repo.insert_subject, app_id=app.app_id, user_id=ada.id, asu="asu_ada",
                                  now=START_TIME)
    token, _ = await signed_in(accounts, ada)
    clock.advance(30)
    deleted = await accounts.delete(ada.email)
    assert (deleted.user_id, deleted.email, deleted.status) == (ada.id, ada.email, AccountStatus.DELETED)
    assert (deleted.deleted_at, deleted.revoked_authorizations) == (START_TIME + 30, 1)
    with pytest.raises(errors.TokenRevoked):
        await accounts.sessions.check(token)
    assert await accounts.list_users() == []
    for operation in (accounts.disable, accounts.enable, accounts.delete):
        with pytest.raises(errors.UserNotFound):
            await operation(ada.email)
    again = await users.create_user(services.db, services.clock, email=ada.email, name="Ada", password=PASSWORD)
    assert again.id != ada.id


async def test_leaving_takes_the_password(accounts, ada):
    _, me = await signed_in(accounts, ada)
    with pytest.raises(errors.LoginFailed, match="password is wrong"):
        await accounts.delete_own(me, "not it")
    left = await accounts.delete_own(me, PASSWORD)
    assert (left.status, left.revoked_authorizations) == (AccountStatus.DELETED, 0)
    with pytest.raises(errors.LoginFailed):
        await signed_in(accounts, ada)


async def test_an_unknown_email_is_not_found(accounts):
    with pytest.raises(errors.UserNotFound):
        await accounts.disable("nobody@example.com")
