"""Pushed authorization requests (RFC 9126): a client sends the parameters of its authorization
request to `/oauth/par` itself, authenticated, and gets a `request_uri` to send the browser to
`/oauth/` with instead of them.

The request is the client's parameters from then on: `/oauth/?client_id=...&request_uri=...` reads
them, whatever else the query says (RFC 9126 4). The reference works for 60 seconds until it is
first used (2.2), then for as long as a user may take to sign in; the pages in between resume from
the reference (what a page changes, such as a `prompt=login` already satisfied, is kept with the
request), and a code or an error sent back to the client spends it (7.3: one-time use).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lbauth.clock import Clock
from lbauth.core.crypto import opaque
from lbauth.errors import RequestUriInvalid
from lbauth.storage.db import Database
from lbauth.storage.records import App
from lbauth.storage.repo import pushed as repo

URN_PREFIX = "urn:ietf:params:oauth:request_uri:"  # RFC 9126 2.2
PUSHED_TTL = 60  # seconds until first use (RFC 9126 2.2 `expires_in`)
INTERACTION_TTL = 1800  # seconds from the first use: signing in, a second step, consent


@dataclass(frozen=True)
class Pushed:
    """The answer of the pushed authorization request endpoint (RFC 9126 2.2)."""
    request_uri: str
    expires_in: int


def names_pushed_request(request_uri: str) -> bool:
    """Is this a `request_uri` this server hands out? Any other is still unsupported (RFC 9101)."""
    return request_uri.startswith(URN_PREFIX + opaque.PUSHED_REQUEST)


class PushedRequests:
    def __init__(self, db: Database, clock: Clock) -> None:
        self.db, self.clock = db, clock

    async def store(self, app: App, parameters: Mapping[str, Sequence[str]]) -> Pushed:
        """Keep a validated request's parameters; its reference, shown once."""
        reference, now = opaque.new_secret(opaque.PUSHED_REQUEST), int(self.clock.now())
        await self.db.transaction(repo.insert_request, request_hash=opaque.digest(reference), app_id=app.id,
                                  parameters={name: list(values) for name, values in parameters.items()}, now=now,
                                  expires_at=now + PUSHED_TTL, single_statement=True)
        return Pushed(URN_PREFIX + reference, PUSHED_TTL)

    async def parameters(self, app: App, request_uri: str) -> dict[str, list[str]]:
        """The live request's parameters, for the app that pushed it; else RequestUriInvalid."""
        now = int(self.clock.now())
        found = await self.db.transaction(repo.open_request, _hash(request_uri), app.id, now, now + INTERACTION_TTL,
                                          single_statement=True)
        if found is None:
            raise RequestUriInvalid()
        return found

    async def keep(self, request_uri: str, resume: Sequence[tuple[str, str]]) -> None:
        """The parameters the request resumes with after a page."""
        parameters: dict[str, list[str]] = {}
        for name, value in resume:
            parameters.setdefault(name, []).append(value)
        await self.db.transaction(repo.keep_parameters, _hash(request_uri), parameters, single_statement=True)

    async def spend(self, request_uri: str) -> None:
        """Before a code or an error goes back: the request is used once (RFC 9126 7.3)."""
        if not await self.db.transaction(repo.complete, _hash(request_uri), int(self.clock.now()),
                                         single_statement=True):
            raise RequestUriInvalid()


def _hash(request_uri: str) -> str:
    return opaque.digest(request_uri.removeprefix(URN_PREFIX))
