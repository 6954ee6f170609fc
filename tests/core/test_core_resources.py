"""Protected resources and resource indicators (lbauth/core/resources.py; RFC 8707, contract 17)
without HTTP: the operator's commands on a real SQLite database, the `resource` values of a request,
the scopes a resource lets through, and the `aud` of the token."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lbauth.clock import FrozenClock
from lbauth.core import resources
from lbauth.core.scopes import ALL, OPENID
from lbauth.errors import Conflict, NotFound, ScopeInvalid, TargetInvalid, ValidationFailed
from lbauth.storage.records import Resource
from lbauth.verify.resources import normalize
from tests.conftest import START_TIME

MCP, NOTES = "https://mcp.example.com", "https://notes.example/api"
FAST = settings(max_examples=200, deadline=None)


@pytest.fixture
def backend() -> str:
    return "sqlite"  # the HTTP tests (tests/test_resources.py) cover PostgreSQL


def resource(uri: str, scopes: list[str] | None = None) -> Resource:
    return Resource(uri, normalize(uri) or "", "R", scopes, START_TIME)


# ---- the operator's commands ------------------------------------------------------------------------

async def test_a_resource_is_added_listed_and_removed(db):
    clock = FrozenClock(START_TIME)
    added = await resources.add_resource(db, clock, MCP, name="Model Context", scopes=["chat.read", "memory.read"])
    assert added == {"resource": MCP, "name": "Model Context", "scopes": ["memory.read", "chat.read"]}  # table order
    other = await resources.add_resource(db, clock, NOTES)
    assert other == {"resource": NOTES, "name": "notes.example", "scopes": None}  # every scope
    assert sorted(await resources.list_resources(db), key=lambda r: r["resource"]) == [added, other]

    assert await resources.remove_resource(db, "HTTPS://MCP.example.com:443/") == added  # any spelling
    assert await resources.list_resources(db) == [other]
    with pytest.raises(NotFound):
        await resources.remove_resource(db, MCP)


async def test_a_resource_is_registered_once_under_any_spelling(db):
    clock = FrozenClock(START_TIME)
    await resources.add_resource(db, clock, MCP)
    for spelling in (MCP, MCP + "/", "https://MCP.EXAMPLE.COM:443"):
        with pytest.raises(Conflict, match="compared as https://mcp.example.com/"):
            await resources.add_resource(db, clock, spelling)
    assert [r["resource"] for r in await resources.list_resources(db)] == [MCP]


async def test_what_the_operator_gives_is_checked_before_anything_is_stored(db):
    clock = FrozenClock(START_TIME)
    for uri in ("mcp.example.com", "/api", "https://mcp.example.com/#frag", ""):
        with pytest.raises(ValidationFailed, match="absolute URI without a fragment"):
            await resources.add_resource(db, clock, uri)
    for name in ("", "   ", "x" * (resources.MAX_NAME + 1), "tab\there"):
        with pytest.raises(ValidationFailed, match="printable characters"):
            await resources.add_resource(db, clock, MCP, name=name)
    with pytest.raises(ScopeInvalid, match="Unknown scope: admin"):
        await resources.add_resource(db, clock, MCP, scopes=["memory.read", "admin"])
    assert await resources.list_resources(db) == []


async def test_a_urn_is_named_after_itself_and_an_empty_scope_list_allows_every_scope(db):
    added = await resources.add_resource(db, FrozenClock(START_TIME), "urn:example:notes", scopes=[])
    assert added == {"resource": "urn:example:notes", "name": "urn:example:notes", "scopes": None}


# ---- `resource` in a request (RFC 8707 2) --------------------------------------------------------------

def test_request_values_are_normalised_and_each_kept_once_in_request_order():
    assert resources.parse([NOTES, MCP, "HTTPS://mcp.example.com:443/", MCP + "/"]) == (
        "https://notes.example/api", "https://mcp.example.com/")
    assert resources.parse([]) == ()


@pytest.mark.parametrize("value", ["mcp.example.com", "/mcp", "https://mcp.example.com/#f", "", " https://a.example",
                                   "https://a.example/\x00", None, 7])
def test_a_value_that_is_not_an_absolute_uri_without_fragment_is_invalid_target(value):
    with pytest.raises(TargetInvalid, match="absolute URI without a fragment"):
        resources.parse([MCP, value])


@FAST
@given(st.lists(st.sampled_from([MCP, MCP + "/", "https://MCP.example.com:443", "http://mcp.example.com:80/",
                                 "http://mcp.example.com:8080", NOTES, NOTES + "/", "urn:Example:x", "URN:Example:x"]),
                max_size=6))
def test_parsing_is_idempotent_and_keeps_one_of_each_form(values):
    parsed = resources.parse(values)
    assert len(set(parsed)) == len(parsed) == len({normalize(v) for v in values})
    assert resources.parse(parsed) == parsed == resources.parse(values + values[::-1])


async def test_registered_resources_come_back_in_request_order(db):
    clock = FrozenClock(START_TIME)
    await resources.add_resource(db, clock, MCP, scopes=["memory.read"])
    await resources.add_resource(db, clock, NOTES)
    found = await resources.registered(db, resources.parse(["HTTPS://Notes.Example:443/api", MCP + "/"]))
    assert [(r.uri, r.scopes) for r in found] == [(NOTES, None), (MCP, ["memory.read"])]
    with pytest.raises(TargetInvalid, match="not known to this server"):
        await resources.registered(db, resources.parse([MCP, "https://unknown.example"]))


async def test_a_request_naming_no_resource_reads_nothing(db):
    before = db.statements
    assert await resources.registered(db, ()) == ()
    assert db.statements == before


# ---- scopes and audience (contract 17) --------------------------------------------------------------------

def test_scopes_outside_a_named_resources_list_are_dropped():
    memory = resource(MCP, ["memory.read", "chat.read"])
    anything = resource(NOTES)
    requested = ["openid", "chat.read", "memory.read", "voice"]
    assert resources.allowed_scopes(requested, [memory]) == ("chat.read", "memory.read")
    assert resources.allowed_scopes(requested, [anything]) == tuple(requested)
    assert resources.allowed_scopes(requested, []) == tuple(requested)
    assert resources.allowed_scopes(requested, [memory, resource(NOTES, ["chat.read"])]) == ("chat.read",)


@FAST
@given(st.lists(st.sampled_from(ALL), unique=True),
       st.lists(st.one_of(st.none(), st.lists(st.sampled_from(ALL), unique=True)), max_size=3))
def test_a_scope_is_granted_exactly_when_every_named_resource_allows_it(requested, lists):
    named = [resource(f"https://r{i}.example", scopes) for i, scopes in enumerate(lists)]
    granted = resources.allowed_scopes(requested, named)
    assert list(granted) == [s for s in requested if all(scopes is None or s in scopes for scopes in lists)]


def test_a_request_without_scope_gets_the_apps_scopes_within_the_resources_never_openid():
    app_scopes = ["openid", "profile", "memory.read", "chat.read"]
    assert resources.default_scopes(app_scopes, [resource(MCP, ["openid", "memory.read"])]) == ("memory.read",)
    assert resources.default_scopes(app_scopes, [resource(MCP)]) == ("profile", "memory.read", "chat.read")
    assert OPENID not in resources.default_scopes(list(ALL), [])


def test_the_audience_of_a_token():
    """As registered, whatever the request's spelling; one as a string, several as a list in request
    order; without `resource`, every one the grant holds; None (LBAUTH_AUDIENCE) when it holds none."""
    held = [MCP, NOTES]
    assert resources.audience(resources.parse([MCP + "/"]), held) == MCP
    assert resources.audience(resources.parse([NOTES, "HTTPS://MCP.example.com"]), held) == [NOTES, MCP]
    assert resources.audience((), held) == held
    assert resources.audience((), []) is None


def test_a_resource_the_grant_does_not_hold_is_invalid_target():
    with pytest.raises(TargetInvalid, match="not granted to this code or refresh token"):
        resources.audience(resources.parse([MCP, "https://other.example"]), [MCP, NOTES])
    with pytest.raises(TargetInvalid):
        resources.audience(resources.parse([MCP]), [])
