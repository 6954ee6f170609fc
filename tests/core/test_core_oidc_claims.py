"""UserInfo's claims by scope (lbauth/core/oidc/claims.py; OpenID Connect Core 5.4, contract 15):
`sub` is always the appScopedUserId, `profile` or `userinfo` open the name and picture, `email` or
`userinfo` the email and whether it is verified, and nothing else is ever shown."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lbauth.core import scopes
from lbauth.core.oidc.claims import SUPPORTED, userinfo
from lbauth.storage.records import User

ASU = "asu_pairwise_1"


def user(*, avatar: str = "https://cdn.example/ada.png", email_verified: bool = True) -> User:
    return User(id="usr_1", email="ada@example.com", name="Ada Lovelace", avatar=avatar, bio="Analyst",
                interest_tags=["math"], password_hash="$argon2id$not-a-real-hash", created_at=1_900_000_000,
                disabled_at=None, deleted_at=None, email_verified=email_verified)


PROFILE = {"name": "Ada Lovelace", "picture": "https://cdn.example/ada.png"}
EMAIL = {"email": "ada@example.com", "email_verified": True}


@pytest.mark.parametrize(("granted", "shown"), [
    ([], {}),
    (["openid"], {}),
    (["openid", "profile"], PROFILE),
    (["openid", "email"], EMAIL),
    (["openid", "profile", "email"], {**PROFILE, **EMAIL}),
    (["openid", "userinfo"], {**PROFILE, **EMAIL}),
    (["openid", "memory.read", "chat.write", "agent_memory"], {}),
])
def test_each_scope_opens_its_claims(granted, shown):
    assert userinfo(user(), ASU, granted) == {"sub": ASU, **shown}


def test_an_empty_avatar_leaves_the_picture_out():
    assert userinfo(user(avatar=""), ASU, ["openid", "profile"]) == {"sub": ASU, "name": "Ada Lovelace"}


def test_email_verified_is_a_boolean_saying_what_the_account_says():
    assert userinfo(user(email_verified=False), ASU, ["email"])["email_verified"] is False
    assert userinfo(user(email_verified=True), ASU, ["email"])["email_verified"] is True


@settings(max_examples=200, deadline=None)
@given(st.sets(st.sampled_from(scopes.ALL)), st.booleans())
def test_userinfo_never_shows_the_user_id_or_an_unsupported_claim(granted, with_avatar):
    """Whatever the scopes: `sub` is the appScopedUserId, never the userId; the bio, interest tags and
    password hash never appear; every claim shown is advertised in claims_supported."""
    document = userinfo(user(avatar="https://cdn.example/a.png" if with_avatar else ""), ASU, granted)
    assert document["sub"] == ASU
    assert set(document) <= set(SUPPORTED)
    assert "usr_1" not in document.values() and "Analyst" not in document.values()
    assert ("name" in document) == bool({"profile", "userinfo"} & granted)
    assert ("email" in document) == ("email_verified" in document) == bool({"email", "userinfo"} & granted)
