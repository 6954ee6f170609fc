"""Resource services that are not Python (issue 19, item 5): off-the-shelf RFC 9068 validators
accept lbauth's access tokens once the `lba_at_` prefix is stripped.

- The Node recipe of docs/resource-services.md (docs/examples/resource-service.mjs, `jose` from the
  npm registry) runs as a real child process against a real lbauth server, with tokens from the
  real flow: it accepts, refuses and follows revocations as lbauth.verify does.
- joserfc, a Python validator that knows nothing of lbauth, verifies the same token.

The Node tests need `node` and tests/node_modules (`make test` runs `npm ci` in tests/). Without
them they are skipped with the reason, except under CI=true, where they fail.

Clocks: the Node service checks `exp` and `iat` against this machine's real clock (jose reads
`Date`), and the recipe has no clock of its own to move. So its lbauth server runs with a frozen
clock set to the real time when the test starts, not conftest's START_TIME in 2030: the tokens
are then current for Node. Expiry is proved by moving the server's clock back by a token lifetime
before it issues a token (that token expired two minutes ago by the real clock), and the
issued-in-the-future check by moving it forward; no test sleeps for either.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time
from pathlib import Path

import pytest
from joserfc import jwt as jose_jwt
from joserfc.errors import DecodeError, ExpiredTokenError
from joserfc.jwk import KeySet

from lbauth.clock import FrozenClock
from tests.client import Client, Response
from tests.conftest import ROOT, TestServer, start_server
from tests.flow_helpers import full_setup, tokens_for
from tests.support import NODE_MODULES, require_node

EXAMPLE = ROOT / "docs" / "examples" / "resource-service.mjs"
DOC = ROOT / "docs" / "resource-services.md"
REVOCATION_DEADLINE = 5.0  # seconds: contract section 7's bound for every process of a deployment


async def launch(workdir: Path, issuer: str, audience: str | None) -> tuple[asyncio.subprocess.Process, bytes, Path]:
    """Start `node` on a copy of the recipe; the process, its first line of output (within 20 s)
    and the file its stderr goes to."""
    node = require_node("jose")
    workdir.mkdir(parents=True, exist_ok=True)
    # A copy of the file people copy, beside the test packages (an ES module finds `jose` in a
    # node_modules next to it or above it; NODE_PATH does not apply to `import`).
    script = workdir / EXAMPLE.name
    shutil.copyfile(EXAMPLE, script)
    (workdir / "node_modules").symlink_to(NODE_MODULES, target_is_directory=True)
    env = {"PATH": "/usr/bin:/bin", "LBAUTH_ISSUER": issuer, "PORT": "0"}
    if audience is not None:
        env["LBAUTH_AUDIENCE"] = audience
    log = workdir / "stderr.log"
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(node, str(script), cwd=workdir, env=env,
                                                       stdout=asyncio.subprocess.PIPE, stderr=stderr)
    try:  # read without blocking the loop: the in-process lbauth answers the recipe's discovery
        line = await asyncio.wait_for(process.stdout.readline(), timeout=20)
    except TimeoutError:
        line = b""
    return process, line, log


class NodeService:
    """docs/examples/resource-service.mjs running in `node`, pointed at an lbauth issuer."""

    def __init__(self, process: asyncio.subprocess.Process, url: str, log: Path) -> None:
        self.process, self.url, self.log = process, url, log
        self.client = Client(url)

    @classmethod
    async def start(cls, workdir: Path, issuer: str, audience: str | None = None) -> NodeService:
        process, line, log = await launch(workdir, issuer, audience)
        match = re.fullmatch(rb"listening on (http://127\.0\.0\.1:\d+)\s*", line)
        if match is None:
            process.kill()
            await process.wait()
            pytest.fail(f"the Node service did not start (exit {process.returncode}): {line!r}\n"
                        f"{log.read_text(errors='replace')[-2000:]}")
        return cls(process, match.group(1).decode(), log)

    async def stop(self) -> None:
        self.client.close()
        if self.process.returncode is None:
            self.process.terminate()
            await self.process.wait()

    async def get(self, path: str, token: str | None) -> Response:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return await self.client.get(path, headers=headers)


def refused(response: Response, status: int, sub_code: str, challenge: str) -> None:
    """The lbauth envelope and the RFC 6750 challenge (section 3)."""
    response.assert_error(status, sub_code)
    assert response.headers.get("WWW-Authenticate") == challenge, response.headers


async def refused_within(service: NodeService, token: str, deadline: float) -> tuple[Response, float]:
    """Ask the service until it refuses `token` or the deadline passes; the answer and when."""
    started = time.monotonic()
    while True:
        response = await service.get("/profile", token)
        elapsed = time.monotonic() - started
        if response.status != 200 or elapsed > deadline:
            return response, elapsed
        await asyncio.sleep(0.1)


@pytest.fixture
async def live_server(tmp_path: Path, database_url: str):
    """lbauth with a frozen clock set to the real time: the Node service checks real time."""
    require_node("jose")
    srv = await start_server(tmp_path, database_url, clock=FrozenClock(time.time()))
    try:
        yield srv
    finally:
        srv.client.close()
        await srv.running.stop()


@pytest.fixture
async def node_services(tmp_path: Path):
    started: list[NodeService] = []

    async def start(issuer: str, audience: str | None = None) -> NodeService:
        service = await NodeService.start(tmp_path / f"node-{len(started)}", issuer, audience)
        started.append(service)
        return service

    yield start
    for service in started:
        await service.stop()


async def token_issued_at(server: TestServer, offset: float, scope: tuple[str, ...] = ("userinfo",)) -> str:
    """An access token issued through the real flow with the server's clock moved by `offset` s."""
    real = server.clock.now()
    server.clock.advance(offset)
    try:
        return (await tokens_for(server, await full_setup(server), scope))["accessToken"]
    finally:
        server.clock.set(real)


async def test_the_node_recipe_accepts_refuses_and_follows_revocations(live_server, node_services):
    server = live_server
    service = await node_services(server.url)
    setup = await full_setup(server)
    token = (await tokens_for(server, setup, ("userinfo",)))["accessToken"]
    user_id = setup.user["userId"]

    # A good token with the scope the route needs: 200, and the service knows the user.
    r = await service.get("/profile", token)
    assert r.status == 200, r.text
    assert r.data["userId"] == user_id and r.data["clientId"] == setup.client_id
    assert r.data["scope"] == ["userinfo"] and r.data["appScopedUserId"].startswith("asu_")

    # RFC 6750 3.1: no token, a wrong scope, a token that is not an lbauth access token.
    refused(await service.get("/profile", None), 401, "oauth2.token.missing", "Bearer")
    refused(await service.get("/notes", token), 403, "oauth2.scope.insufficient", 'Bearer error="insufficient_scope"')
    for not_an_access_token in (token.removeprefix("lba_at_"),  # the bare JWT, as off-the-shelf clients would
                                "lba_at_" + token,  # the prefix is stripped once only
                                setup.token,  # the user's own lba_ut_ token
                                "lba_at_" + token.removeprefix("lba_at_")[:-4] + "AAAA"):  # a broken signature
        refused(await service.get("/profile", not_an_access_token), 401, "oauth2.token.invalid",
                'Bearer error="invalid_token"')

    # A genuine token at a service that is another audience.
    elsewhere = await node_services(server.url, audience="https://another-api.example")
    refused(await elsewhere.get("/profile", token), 401, "oauth2.token.invalid", 'Bearer error="invalid_token"')

    # Time, by this machine's real clock: expired two minutes ago (beyond the 30 s leeway), and
    # issued ten minutes from now.
    expired = await token_issued_at(server, -(server.settings.access_token_ttl + 120))
    refused(await service.get("/profile", expired), 401, "oauth2.token.expired", 'Bearer error="invalid_token"')
    future = await token_issued_at(server, 600)
    r = await service.get("/profile", future)
    refused(r, 401, "oauth2.token.invalid", 'Bearer error="invalid_token"')
    assert r.json["message"] == "The access token was issued in the future."

    # The app revokes one access token (RFC 7009): a jti entry refuses that token only.
    second = (await tokens_for(server, setup))["accessToken"]  # another token of the same grant
    assert (await service.get("/profile", second)).status == 200
    r = await server.client.post("/oauth/revoke", form={"token": second, "client_id": setup.client_id,
                                                        "client_secret": setup.client_secret})
    assert r.status == 200, r.text
    r, elapsed = await refused_within(service, second, REVOCATION_DEADLINE)
    refused(r, 401, "oauth2.token.revoked", 'Bearer error="invalid_token"')
    assert elapsed <= REVOCATION_DEADLINE
    assert (await service.get("/profile", token)).status == 200

    # The user revokes the app: a grant entry refuses every token of the grant.
    r = await server.client.delete(f"/api/auth/authorizations/{setup.client_id}", bearer=setup.token)
    assert r.status == 200, r.text
    r, elapsed = await refused_within(service, token, REVOCATION_DEADLINE)
    refused(r, 401, "oauth2.token.revoked", 'Bearer error="invalid_token"')
    assert elapsed <= REVOCATION_DEADLINE


async def test_the_node_recipe_will_not_start_on_metadata_naming_another_issuer(live_server, tmp_path):
    """RFC 8414 3.3: the metadata's `issuer` must be the configured issuer byte for byte (here the
    configured one has a trailing slash), or the recipe stops at once rather than refuse every token."""
    process, line, log = await launch(tmp_path / "node", live_server.url + "/", None)
    if process.returncode is None:
        process.kill()
    assert await process.wait() != 0 and line == b"", line
    assert f"the metadata names another issuer: {live_server.url}" in log.read_text()


def test_the_doc_shows_the_tested_file():
    """docs/resource-services.md shows docs/examples/resource-service.mjs exactly: what people
    copy is what this test runs."""
    doc = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"```js\n(.*?)```", doc, flags=re.DOTALL)
    assert EXAMPLE.read_text(encoding="utf-8") in blocks


async def test_joserfc_verifies_the_token_once_the_prefix_is_stripped(server):
    """An off-the-shelf Python validator (joserfc) with RFC 9068's checks: the token as issued is
    not a JWT to it; with `lba_at_` removed, signature, `typ` and claims all pass. joserfc takes
    the time to check against, so the server's frozen clock is given."""
    metadata = (await server.client.get("/.well-known/oauth-authorization-server")).json
    keys = KeySet.import_key_set(json.loads((await server.client.get(metadata["jwks_uri"])).body))
    token = (await tokens_for(server, await full_setup(server)))["accessToken"]

    with pytest.raises(DecodeError):
        jose_jwt.decode(token, keys, algorithms=["ES256", "RS256", "EdDSA"])

    decoded = jose_jwt.decode(token.removeprefix("lba_at_"), keys, algorithms=["ES256", "RS256", "EdDSA"])
    assert decoded.header["typ"] == "at+jwt"
    required = {name: {"essential": True} for name in ("sub", "client_id", "scope", "iat", "exp", "jti")}
    registry = jose_jwt.JWTClaimsRegistry(now=lambda: int(server.clock.now()), leeway=30,
                                          iss={"essential": True, "value": metadata["issuer"]},
                                          aud={"essential": True, "value": server.settings.audience}, **required)
    registry.validate(decoded.claims)

    server.clock.advance(server.settings.access_token_ttl + 31)
    with pytest.raises(ExpiredTokenError):
        registry.validate(decoded.claims)
