"""Key rotation with no failed request (contract section 8): the signing key through stage, promote
and retire while other processes verify continuously; the master key through add, promote and
retire with signing, sessions and webhooks working throughout."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import jwt
import pytest

from lbauth.clock import SystemClock
from lbauth.core.crypto import reseal
from tests.conftest import ROOT, start_server
from tests.flow_helpers import PageSession, full_setup, refresh, tokens_for
from tests.forked import ZYGOTE
from tests.processes import ServerProcess
from tests.receiver import Receiver
from tests.support import unverified_claims, wait_until

pytestmark = pytest.mark.slow


def tool(name: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("LBAUTH_")} | env
    return ZYGOTE.run(list(args), env=full, script=str(ROOT / "tools" / name))


async def atool(name: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The tool in a thread: the server in this process keeps serving (and committing) meanwhile."""
    return await asyncio.to_thread(tool, name, *args, env=env)


class Probe:
    """tests/verifier_probe.py in its own process: lbauth.verify as a resource service runs it."""

    def __init__(self, issuer: str, audience: str) -> None:
        # `-m` from the checkout's root: the lbauth beside these tests, whatever the venv points at.
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.verifier_probe", issuer, audience],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        self.lock = asyncio.Lock()  # one question at a time: the traffic and the test both ask

    async def ready(self) -> None:
        assert (await asyncio.to_thread(self.proc.stdout.readline)).strip() == "ready"

    async def ask(self, line: str) -> str:
        async with self.lock:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
            return (await asyncio.to_thread(self.proc.stdout.readline)).strip()

    async def verify(self, token: str) -> str:
        return await self.ask(token)

    async def kids(self) -> set[str]:
        """The key ids the verifier holds now (it fetches the JWKS every second here)."""
        answer = (await self.ask("?kids")).split()
        assert answer[:1] == ["kids"], answer
        return set(answer[1:])

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


async def published(server) -> set[str]:
    """The key ids a server's JWKS publishes now."""
    return {k["kid"] for k in (await server.client.get("/.well-known/jwks.json")).json["keys"]}


async def promote_when_allowed(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`rotate_signing_key.py promote`, again while it says to wait for the (shortened) grace."""
    while True:
        result = await atool("rotate_signing_key.py", "promote", *args, "--grace", "2", "--json", env=env)
        if result.returncode == 0 or "Wait" not in result.stderr:
            return result
        await asyncio.sleep(0.5)


async def test_signing_key_rotation_refuses_no_valid_token(tmp_path, database_url):
    ttl = 3
    # A retiring key must outlast everything it may have signed, ID tokens included (their TTL too).
    first = await start_server(tmp_path, database_url, env="development", clock=SystemClock(),
                               access_token_ttl=ttl, id_token_ttl=ttl)
    second = await ServerProcess(database_url, tmp_path / "data", base_url=first.url,
                                 access_token_ttl=str(ttl), id_token_ttl=str(ttl)).start()
    probe = Probe(first.url, first.settings.audience)
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(tmp_path / "data"),
           "LBAUTH_ACCESS_TOKEN_TTL": str(ttl), "LBAUTH_ID_TOKEN_TTL": str(ttl)}
    failures: list[str] = []
    seen_kids: list[str] = []
    stop = asyncio.Event()
    try:
        await probe.ready()
        setup = await full_setup(first)
        refresh_token = (await tokens_for(first, setup))["refreshToken"]
        old_kid = first.services.keyring.signer.kid
        id_kid = first.services.keyring.signers["RS256"].kid
        held: list[tuple[str, float]] = []  # tokens re-verified until they expire
        rounds = 0

        async def traffic() -> None:
            nonlocal rounds
            while not stop.is_set():
                rounds += 1
                r = await refresh(first, refresh_token, setup.client_id, setup.client_secret)
                token = r.data["accessToken"]
                kid = jwt.get_unverified_header(token[7:])["kid"]
                if kid not in seen_kids:
                    seen_kids.append(kid)
                exp = unverified_claims(token)["exp"]
                held.append((token, exp - 1.5))  # checked while comfortably inside its lifetime
                for tok, good_until in list(held):
                    if time.time() > good_until:
                        held.remove((tok, good_until))
                        continue
                    answer = await probe.verify(tok)
                    if not answer.startswith("ok") and time.time() < good_until:
                        failures.append(f"verifier: {answer}")
                    for server in (first.client, second.client):
                        me = await server.get("/api/auth/me", bearer=tok)
                        if me.status != 200 and time.time() < good_until:
                            failures.append(f"/api/auth/me: {me.text}")
                await asyncio.sleep(0.1)

        running = asyncio.ensure_future(traffic())
        await asyncio.sleep(1)
        staged = json.loads((await atool("rotate_signing_key.py", "stage", "--json", env=env)).stdout)
        # What the grace is for: every server publishes the staged key (this process reloads now,
        # the other at its next periodic reload) and the verifier has fetched it, before it signs.
        # Waited for as it happens, not for a number of seconds (a fixed sleep failed under load).
        await first.running.reload_keys()
        await wait_until(lambda: _holds(published(second), staged["kid"]), 30,
                         "the other process publishes the staged key")
        await wait_until(lambda: _holds(probe.kids(), staged["kid"]), 30, "the verifier holds the staged key")
        promoted = await promote_when_allowed(env)
        assert promoted.returncode == 0, promoted.stderr
        await first.running.reload_keys()
        while True:  # retire as soon as the tool says it is safe
            result = await atool("rotate_signing_key.py", "retire", "--leeway", "1", "--json", env=env)
            if result.returncode == 0:
                break
            assert "Wait" in result.stderr
            await asyncio.sleep(1)
        # The servers drop the retired key, and so does the verifier, while the traffic goes on.
        await first.running.reload_keys()
        await wait_until(lambda: _lacks(published(second), old_kid), 30, "the other process drops the retired key")
        await wait_until(lambda: _lacks(probe.kids(), old_kid), 30, "the verifier drops the retired key")
        after = rounds
        await wait_until(lambda: (rounds >= after + 3), 30, "the traffic goes on past the reloads")
        stop.set()
        await running
        assert failures == []
        assert seen_kids == [old_kid, staged["kid"]]
        jwks = (await first.client.get("/.well-known/jwks.json")).json
        # Rotation is per algorithm (contract 8): the RS256 ID-token key is untouched.
        assert [k["kid"] for k in jwks["keys"] if k["alg"] == "ES256"] == [staged["kid"]]
        assert [k["kid"] for k in jwks["keys"] if k["alg"] == "RS256"] == [id_kid]
    finally:
        stop.set()
        probe.close()
        second.stop()
        first.client.close()
        await first.running.stop()


async def test_each_signing_step_refuses_what_would_break_tokens(tmp_path, database_url):
    srv = await start_server(tmp_path, database_url)
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(tmp_path / "data")}
    try:
        old_kid = srv.services.keyring.signer.kid  # ES256: the access-token key
        id_kid = srv.services.keyring.signers["RS256"].kid  # the ID tokens' key, made at the first start
        assert (await atool("rotate_signing_key.py", "promote", env=env)).returncode == 1  # nothing staged
        staged = await atool("rotate_signing_key.py", "stage", "--alg", "ES256", "--json", env=env)
        staged = json.loads(staged.stdout)
        again = await atool("rotate_signing_key.py", "stage", env=env)  # the signing_alg setting: ES256
        assert again.returncode == 1 and "already staged" in again.stderr
        early = await atool("rotate_signing_key.py", "promote", env=env)
        assert early.returncode == 1 and "Wait" in early.stderr and "--force" in early.stderr
        # Another algorithm's rotation is its own: an RS256 key stages beside the staged ES256 one,
        # and promote must then be told which.
        rs = json.loads((await atool("rotate_signing_key.py", "stage", "--alg", "RS256", "--json", env=env)).stdout)
        which = await atool("rotate_signing_key.py", "promote", "--force", env=env)
        assert which.returncode == 1 and "--alg" in which.stderr
        promoted = await atool("rotate_signing_key.py", "promote", "--alg", "ES256", "--force", "--json", env=env)
        assert promoted.returncode == 0 and json.loads(promoted.stdout)["kid"] == staged["kid"]
        await srv.running.reload_keys()
        assert srv.services.keyring.signer.kid == staged["kid"]
        assert srv.services.keyring.signers["RS256"].kid == id_kid  # untouched
        early_retire = await atool("rotate_signing_key.py", "retire", env=env)
        assert early_retire.returncode == 1 and "may be live until" in early_retire.stderr
        # Rolling back: the retiring key signs again, at once.
        back = await atool("rotate_signing_key.py", "promote", f"--kid={old_kid}", "--json", env=env)
        assert json.loads(back.stdout)["kid"] == old_kid
        await srv.running.reload_keys()
        assert srv.services.keyring.signer.kid == old_kid
        status = json.loads((await atool("rotate_signing_key.py", "status", "--json", env=env)).stdout)
        assert {k["kid"]: k["state"] for k in status} == {old_kid: "active", staged["kid"]: "retiring",
                                                        id_kid: "active", rs["kid"]: "staged"}
        # A staged key that is not wanted can be withdrawn at once: it never signed anything.
        withdrawn = await atool("rotate_signing_key.py", "retire", f"--kid={rs['kid']}", "--json", env=env)
        assert withdrawn.returncode == 0 and json.loads(withdrawn.stdout)[0]["state"] == "retired"
        await srv.running.reload_keys()
        jwks = (await srv.client.get("/.well-known/jwks.json")).json
        assert rs["kid"] not in {k["kid"] for k in jwks["keys"]}
    finally:
        srv.client.close()
        await srv.running.stop()


async def test_a_rotation_moves_access_tokens_only_to_the_signing_alg_setting(tmp_path, database_url):
    """Contract 8: the key ring stores which key signs access tokens. Rotating the RS256 ID-token key
    (younger than the access-token key or not) leaves access tokens on ES256; rotating to the
    algorithm LBAUTH_SIGNING_ALG names moves them, and the old access-token key stays active for
    the ID tokens of its algorithm."""
    from lbauth.core.crypto import keys

    srv = await start_server(tmp_path, database_url)
    s = srv.services
    try:
        access_kid = s.keyring.signer.kid  # ES256, made by the first start
        for _ in range(2):  # the ES256 key rotated first: the RS256 key is then the oldest active one
            staged = await keys.stage_key(srv.db, srv.clock, s.master_keys, "ES256")
            await keys.promote_key(srv.db, srv.clock, alg="ES256", force=True, access_alg="ES256")
            await s.reload_keys()
            assert s.keyring.signer.kid == staged["kid"] != access_kid
            access_kid = staged["kid"]
            rs = await keys.stage_key(srv.db, srv.clock, s.master_keys, "RS256")
            await keys.promote_key(srv.db, srv.clock, alg="RS256", force=True, access_alg="ES256")
            await s.reload_keys()
            assert s.keyring.signer.kid == access_kid
            assert s.keyring.signers["RS256"].kid == rs["kid"]
        # With LBAUTH_SIGNING_ALG EdDSA, promoting an EdDSA key moves access tokens to it.
        ed = await keys.stage_key(srv.db, srv.clock, s.master_keys, "EdDSA")
        await keys.promote_key(srv.db, srv.clock, alg="EdDSA", force=True, access_alg="EdDSA")
        await s.reload_keys()
        assert (s.keyring.signer.kid, s.keyring.signer.alg) == (ed["kid"], "EdDSA")
        assert s.keyring.signers["ES256"].kid == access_kid  # still active, for ES256 ID tokens
        # ... and an ES256 rotation now leaves them on EdDSA.
        await keys.stage_key(srv.db, srv.clock, s.master_keys, "ES256")
        await keys.promote_key(srv.db, srv.clock, alg="ES256", force=True, access_alg="EdDSA")
        await s.reload_keys()
        assert s.keyring.signer.kid == ed["kid"]
    finally:
        srv.client.close()
        await srv.running.stop()


async def _holds(kids, kid: str) -> bool:
    return kid in await kids


async def _lacks(kids, kid: str) -> bool:
    return kid not in await kids



class RelyingParty:
    """What an OpenID Connect library does with ID tokens: verify them against the issuer's JWKS,
    cached, fetched again every second and on an unknown `kid` (at most twice a second)."""

    def __init__(self, servers: list, issuer: str, client_id: str) -> None:
        self.servers, self.issuer, self.client_id = servers, issuer, client_id
        self.keys: dict[str, object] = {}
        self.fetched_at = 0.0
        self.fetches = 0

    async def fetch(self) -> None:
        server = self.servers[self.fetches % len(self.servers)]  # every process publishes the same set
        self.fetches += 1
        document = (await server.client.get("/.well-known/jwks.json")).json
        self.keys = {k["kid"]: jwt.PyJWK.from_dict(k) for k in document["keys"]}
        self.fetched_at = time.monotonic()

    async def verify(self, id_token: str) -> str:
        kid = jwt.get_unverified_header(id_token)["kid"]
        if time.monotonic() - self.fetched_at > 1 or (kid not in self.keys and
                                                     time.monotonic() - self.fetched_at > 0.5):
            await self.fetch()
        key = self.keys.get(kid)
        if key is None:
            return f"unknown kid {kid}"
        try:
            jwt.decode(id_token, key, algorithms=["RS256"], audience=self.client_id, issuer=self.issuer, leeway=1)
        except jwt.PyJWTError as exc:
            return f"{type(exc).__name__}: {exc}"
        return "ok"


async def test_id_token_key_rotation_refuses_no_valid_id_token(tmp_path, database_url):
    """Contract 8 and 15: the RS256 ID-token key goes through stage, promote and retire while a
    relying party verifies every ID token still inside its lifetime against the JWKS, continuously."""
    ttl = 3
    first = await start_server(tmp_path, database_url, env="development", clock=SystemClock(),
                               access_token_ttl=ttl, id_token_ttl=ttl)
    second = await ServerProcess(database_url, tmp_path / "data", base_url=first.url,
                                 access_token_ttl=str(ttl), id_token_ttl=str(ttl)).start()
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(tmp_path / "data"),
           "LBAUTH_ACCESS_TOKEN_TTL": str(ttl), "LBAUTH_ID_TOKEN_TTL": str(ttl)}
    failures: list[str] = []
    seen_kids: list[str] = []
    stop = asyncio.Event()
    try:
        setup = await full_setup(first)
        tokens = await tokens_for(first, setup, scope=("openid", "profile"))
        assert tokens["idToken"]
        refresh_token = tokens["refreshToken"]
        access_kid = first.services.keyring.signer.kid
        old_kid = first.services.keyring.signers["RS256"].kid
        rp = RelyingParty([first, second], first.settings.issuer, setup.client_id)
        held: list[tuple[str, float]] = []  # ID tokens re-verified until they expire
        count = 0

        async def traffic() -> None:
            nonlocal count
            while not stop.is_set():
                server = (first, second)[count % 2]  # both processes mint ID tokens
                count += 1
                r = await refresh(server, refresh_token, setup.client_id, setup.client_secret)
                if r.status != 200:
                    failures.append(f"refresh: {r.text}")
                    continue
                id_token = r.data["idToken"]
                kid = jwt.get_unverified_header(id_token)["kid"]
                if kid not in seen_kids:
                    seen_kids.append(kid)
                exp = unverified_claims(id_token)["exp"]
                held.append((id_token, exp - 1.5))  # checked while comfortably inside its lifetime
                for tok, good_until in list(held):
                    if time.time() > good_until:
                        held.remove((tok, good_until))
                        continue
                    answer = await rp.verify(tok)
                    if answer != "ok" and time.time() < good_until:
                        failures.append(f"relying party: {answer}")
                await asyncio.sleep(0.1)

        running = asyncio.ensure_future(traffic())
        await asyncio.sleep(1)
        stage = await atool("rotate_signing_key.py", "stage", "--alg", "RS256", "--json", env=env)
        assert stage.returncode == 0, stage.stderr
        staged = json.loads(stage.stdout)
        # Every server publishes it (this process reloads now, the other at its next periodic
        # reload) and the relying party has fetched it, before it signs.
        await first.running.reload_keys()
        await wait_until(lambda: _holds(published(second), staged["kid"]), 30,
                         "the other process publishes the staged key")
        await wait_until(lambda: (staged["kid"] in rp.keys), 30, "the relying party holds the staged key")
        promoted = await promote_when_allowed(env, "--alg", "RS256")
        assert promoted.returncode == 0, promoted.stderr
        assert json.loads(promoted.stdout)["kid"] == staged["kid"]
        await first.running.reload_keys()
        while True:  # retire as soon as the tool says it is safe
            result = await atool("rotate_signing_key.py", "retire", "--leeway", "1", "--json", env=env)
            if result.returncode == 0:
                break
            assert "Wait" in result.stderr
            await asyncio.sleep(1)
        # The servers drop the retired key, and so does the relying party, while the traffic goes on.
        await first.running.reload_keys()
        await wait_until(lambda: _lacks(published(second), old_kid), 30, "the other process drops the retired key")
        await wait_until(lambda: (old_kid not in rp.keys), 30, "the relying party drops the retired key")
        after = count
        await wait_until(lambda: (count >= after + 3), 30, "the traffic goes on past the reloads")
        stop.set()
        await running
        assert failures == []
        assert count > 20  # the traffic ran all along
        assert seen_kids == [old_kid, staged["kid"]]
        jwks = (await first.client.get("/.well-known/jwks.json")).json
        assert [k["kid"] for k in jwks["keys"] if k["alg"] == "RS256"] == [staged["kid"]]
        assert first.services.keyring.signer.kid == access_kid  # the access-token key is untouched
        assert [k["kid"] for k in jwks["keys"] if k["alg"] == "ES256"] == [access_kid]
    finally:
        stop.set()
        second.stop()
        first.client.close()
        await first.running.stop()


def oathtool(secret: str, when: float) -> str:
    from tests.test_second_factors import oathtool as code
    return code(secret, when)


async def test_master_key_rotation_reseals_everything_and_nothing_stops(tmp_path, database_url):
    receiver = Receiver()
    srv = await start_server(tmp_path, database_url, env="development")
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(tmp_path / "data")}
    try:
        setup = await full_setup(srv, webhook_url=receiver.url)
        browser = PageSession(srv)
        page = await browser.open_logged_in("/account/apps", setup.user["email"], setup.user["password"])
        assert page.status == 200 and page.login_form() is None
        # A TOTP secret (contract 19) is sealed too; its notice's parameters in the mail outbox as well.
        secret = (await srv.client.post("/api/account/security/totp", bearer=setup.token)).data["secret"]
        confirmed = await srv.client.post("/api/account/security/totp/confirm", bearer=setup.token,
                                          json={"code": oathtool(secret, srv.clock.now())})
        assert confirmed.status == 200, confirmed.text
        if srv.running.mailer is not None:
            await srv.running.mailer.flush()
        sealed_before = sum((await reseal.sealed_counts(srv.db)).values())
        assert sealed_before >= 5  # webhook secret, two signing keys, TOTP secret, the notice
        old_id = srv.services.master_keys.primary_id

        added = json.loads((await atool("rotate_master_key.py", "add", "--json", env=env)).stdout)
        await srv.running.reload_keys()
        assert srv.services.master_keys.ids == (old_id, added["keyId"])
        promoted = await atool("rotate_master_key.py", "promote", added["keyId"], "--force", "--json", env=env)
        assert promoted.returncode == 0, promoted.stderr
        # the webhook secret, the two signing keys (access tokens' ES256, ID tokens' RS256), the
        # TOTP secret and the mail outbox's sealed values
        assert json.loads(promoted.stdout)["resealed"] == sealed_before
        await srv.running.reload_keys()
        assert (await browser.get("/account/apps")).login_form() is None  # and the cookie is re-signed
        early = await atool("rotate_master_key.py", "retire", added["keyId"], env=env)
        assert early.returncode == 1 and "sealing key" in early.stderr
        retired = await atool("rotate_master_key.py", "retire", old_id, "--json", env=env)
        assert retired.returncode == 0, retired.stderr
        await srv.running.reload_keys()
        assert srv.services.master_keys.ids == (added["keyId"],)
        assert await reseal.sealed_counts(srv.db) == {added["keyId"]: sealed_before}  # nothing under the old key
        srv.clock.advance(30)  # the TOTP secret opens under the new key: its sign-in works
        step = (await srv.client.post("/api/auth/login", json={"email": setup.user["email"],
                                                               "password": setup.user["password"]})).data
        done = await srv.client.post("/api/auth/login/mfa", json={"mfaToken": step["mfaToken"], "method": "totp",
                                                                  "code": oathtool(secret, srv.clock.now())})
        assert done.status == 200, done.text

        # The session cookie signed before the rotation still works; signing and webhooks too.
        assert (await browser.get("/account/apps")).login_form() is None
        tokens = await tokens_for(srv, setup)
        assert (await srv.client.get("/api/auth/me", bearer=tokens["accessToken"])).status == 200
        r = await srv.client.delete(f"/api/auth/authorizations/{setup.client_id}", bearer=setup.token)
        await srv.running.deliverer.flush()
        from lbauth import webhooks
        (request,) = receiver.received
        assert request.event_id == r.data["eventId"]
        webhooks.verify_signature(setup.app["webhookSecret"], request.headers["X-Service-Timestamp"], request.body,
                                  request.headers["X-Service-Signature"], now=srv.clock.now())
    finally:
        srv.client.close()
        await srv.running.stop()
        await receiver.stop()

    # A fresh start with only the new key signs with the same signing key.
    again = await start_server(tmp_path, database_url)
    try:
        assert (await again.client.get("/readyz")).status == 200
        assert again.services.keyring.signer is not None
    finally:
        again.client.close()
        await again.running.stop()


async def test_serve_says_once_when_the_signing_alg_setting_differs_from_the_active_key(tmp_path, database_url):
    """Contract 8: LBAUTH_SIGNING_ALG=EdDSA on a database whose active key is ES256 keeps signing
    ES256, and `lbauth serve` says so at start, once (not once per worker), naming the tool."""
    first = await start_server(tmp_path, database_url)  # makes the ES256 key
    kid = first.services.keyring.signer.kid
    first.client.close()
    await first.running.stop()
    server = await ServerProcess(database_url, tmp_path / "data", signing_alg="EdDSA", workers="2").start()
    try:
        jwks = (await server.client.get("/.well-known/jwks.json")).json
        assert [(k["kid"], k["alg"]) for k in jwks["keys"] if k["alg"] != "RS256"] == [(kid, "ES256")]
    finally:
        server.stop()
    notices = [json.loads(line) for line in server.log.read_text().splitlines()
               if line.startswith("{") and "LBAUTH_SIGNING_ALG" in line]
    assert len(notices) == 1, notices
    (notice,) = notices
    assert notice["level"] == "warning"
    assert (notice["activeAlg"], notice["signingAlg"], notice["kid"]) == ("ES256", "EdDSA", kid)
    for needle in ("is EdDSA", f"{kid} is ES256", "signed with ES256", "tools/rotate_signing_key.py",
                   "stage --alg EdDSA"):
        assert needle in notice["msg"], notice["msg"]
