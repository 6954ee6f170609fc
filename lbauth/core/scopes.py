"""The permission table (spec section 2; contract section 5: these nine and no other)."""

from __future__ import annotations

from collections.abc import Iterable

from lbauth.errors import ScopeInvalid

SCOPES: dict[str, str] = {
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
    """RFC 6749 3.3: scope is a space-delimited list."""
    return validate(part for part in value.split(" ") if part)
