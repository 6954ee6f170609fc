"""Protected resources and resource indicators (RFC 8707, contract 17).

The operator registers resources (`lbauth resources add`); clients name them with `resource` at
the authorization and token endpoints. URIs are compared by their RFC 3986 6.2.2 form, computed by
`lbauth.verify.resources.normalize` (one rule for the server and for resource services); `aud`
carries the URI as the operator gave it. A resource's `scopes` are the only ones a token for it may
carry (None: every scope): requested scopes outside them are dropped, not refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from lbauth.clock import Clock
from lbauth.core import scopes as scopes_mod
from lbauth.core import urls
from lbauth.errors import Conflict, NotFound, ScopeInvalid, TargetInvalid, ValidationFailed
from lbauth.storage import Connection, Duplicate
from lbauth.storage.db import Database
from lbauth.storage.records import Resource
from lbauth.storage.repo import resources as repo
from lbauth.verify.resources import normalize, same_resource

MAX_NAME = 200


def view(resource: Resource) -> dict[str, Any]:
    """As `lbauth resources add/list/remove` print it: `scopes` null means every scope."""
    return {"resource": resource.uri, "name": resource.name,
            "scopes": list(resource.scopes) if resource.scopes is not None else None}


def _checked_uri(uri: str) -> str:
    normalized = normalize(uri)
    if normalized is None:
        raise ValidationFailed("The resource must be an absolute URI without a fragment (RFC 8707 2).")
    return normalized


async def add_resource(db: Database, clock: Clock, uri: str, *, name: str | None = None,
                       scopes: Sequence[str] | None = None) -> dict[str, Any]:
    """Register a resource; one that exists already under any spelling of its URI is a Conflict."""
    normalized = _checked_uri(uri)
    parts = urls.split(uri)
    name = (name if name is not None else ((parts.hostname if parts is not None else None) or uri)).strip()
    if not name or len(name) > MAX_NAME or not name.isprintable():
        raise ValidationFailed(f"The name must be 1 to {MAX_NAME} printable characters.")
    allowed = list(scopes_mod.validate(scopes)) if scopes else None
    resource = Resource(uri, normalized, name, allowed, int(clock.now()))

    def work(conn: Connection) -> None:
        repo.insert_resource(conn, uri=uri, normalized=normalized, name=name, scopes=allowed, now=resource.created_at)
    try:
        await db.transaction(work)
    except Duplicate:
        raise Conflict(f"A resource with this URI is already registered (compared as {normalized}).") from None
    return view(resource)


async def list_resources(db: Database) -> list[dict[str, Any]]:
    return [view(r) for r in await db.read(repo.all_resources)]


async def remove_resource(db: Database, uri: str) -> dict[str, Any]:
    """Remove a resource named by any spelling of its URI. Tokens already issued for it stay valid
    until they expire; new requests naming it get invalid_target."""
    removed = await db.transaction(repo.delete_by_normalized, _checked_uri(uri))
    if removed is None:
        raise NotFound("No resource with this URI is registered.")
    return view(removed)


# ---- resource indicators in requests (RFC 8707 2) --------------------------------------------------

def parse(values: Iterable[Any]) -> tuple[str, ...]:
    """The normalised forms of the `resource` values of a request, each once; invalid_target for
    a value that is not an absolute URI without a fragment."""
    found: list[str] = []
    for value in values:
        normalized = normalize(value)
        if normalized is None:
            raise TargetInvalid("A resource must be an absolute URI without a fragment.")
        if normalized not in found:
            found.append(normalized)
    return tuple(found)


async def registered(db: Database, normalized: Sequence[str]) -> tuple[Resource, ...]:
    """The registered resources these normalised URIs name, in request order; invalid_target
    if any is unknown."""
    if not normalized:
        return ()
    by_form = {r.normalized: r for r in await db.read(repo.by_normalized, normalized)}
    if any(n not in by_form for n in normalized):
        raise TargetInvalid("The requested resource is not known to this server.")
    return tuple(by_form[n] for n in normalized)


async def resolve(db: Database, indicators: Sequence[str], requested: Sequence[str], scope_sent: bool,
                  app_scopes: Sequence[str]) -> tuple[tuple[str, ...], tuple[Resource, ...]]:
    """A request's scopes within the resources it names (`indicators`, normalised), and those
    resources: requested scopes outside their lists are dropped, and a request that sent no
    `scope` gets the app's within them (`default_scopes`); nothing left is invalid_scope."""
    named = await registered(db, indicators)
    kept = allowed_scopes(requested, named) if scope_sent else default_scopes(app_scopes, named)
    if not kept:
        raise ScopeInvalid("None of the requested scopes is allowed for the requested resource.")
    return kept, named


def allowed_scopes(requested: Sequence[str], resources: Sequence[Resource]) -> tuple[str, ...]:
    """The requested scopes that every named resource allows (contract 17: the others are dropped,
    not refused, and the token response's `scope` says what was granted)."""
    return tuple(s for s in requested
                 if all(r.scopes is None or s in r.scopes for r in resources))


def default_scopes(app_scopes: Sequence[str], resources: Sequence[Resource]) -> tuple[str, ...]:
    """For a request naming resources but no scope: the app's scopes within their lists, never
    `openid` (an agent asking for a resource is not asking to sign the user in)."""
    return allowed_scopes([s for s in app_scopes if s != scopes_mod.OPENID], resources)


def audience(requested: Sequence[str], held: Sequence[str]) -> str | list[str] | None:
    """The `aud` of an access token (contract 17): for a request naming resources (`requested`,
    normalised), those of the grant's (`held`, as registered), one as a string, several as a list;
    a named one the grant does not hold is invalid_target. Without `resource`, every one held, as
    a list; None (LBAUTH_AUDIENCE) when the grant holds none."""
    if not requested:
        return list(held) if held else None
    chosen = []
    for normalized in requested:
        match = next((uri for uri in held if same_resource(uri, normalized)), None)
        if match is None:
            raise TargetInvalid("The requested resource was not granted to this code or refresh token.")
        chosen.append(match)
    return chosen[0] if len(chosen) == 1 else chosen
