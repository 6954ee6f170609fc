"""The permission table: the specification's nine (spec section 2) and OpenID Connect's three
(contract sections 5 and 15; OpenID Connect Core 5.4), and no other."""

from __future__ import annotations

from collections.abc import Iterable

from lbauth.errors import ScopeInvalid

OPENID = "openid"
SCOPES: dict[str, str] = {
    OPENID: "Sign you in to this app with your lbauth account",
    "profile": "See your name and picture",
    "email": "See your email address and whether it is verified",
    "userinfo": "See your profile: name, email, avatar, bio and interest tags",
    "memory.read": "Search your key memories",
    "chat.read": "See your chat sessions and message history",
    "chat.write": "Send messages and stream chats as you",
    "note.write": "Add notes and memories",
    "voice": "Use text-to-speech",
    "plaza.read": "Browse the feed, posts and comments",
    "plaza.write": "Create posts and comments as you",
    "agent_memory": "Record and query agent memory events",
}
ALL = tuple(SCOPES)


def validate(scopes: Iterable[str]) -> tuple[str, ...]:
    """The scopes in table order, without repeats; any string outside the table is ScopeInvalid."""
    wanted = set()
    for scope in scopes:
        if not isinstance(scope, str) or scope not in SCOPES:
            raise ScopeInvalid("Unknown scope: " + (scope if isinstance(scope, str) and scope.isprintable()
                                                    and len(scope) <= 64 else "(unprintable)"))
        wanted.add(scope)
    return tuple(s for s in ALL if s in wanted)


def parse_space_separated(value: str) -> tuple[str, ...]:
    """RFC 6749 3.3: scope is a space-delimited list. In an OpenID request (one holding `openid`),
    values outside the table (`offline_access`, say) are ignored, not refused (OpenID Connect Core
    3.1.2.1; contract 5): left out of the grant, the consent page and the token response."""
    return requested([part for part in value.split(" ") if part])


def requested(parts: list[str]) -> tuple[str, ...]:
    """The scopes an authorization request asks for: `validate`, except that an OpenID request's
    unknown values are dropped."""
    if OPENID in parts:
        parts = [part for part in parts if part in SCOPES]
    return validate(parts)
