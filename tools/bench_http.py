"""HTTP benchmarks for `make bench` (tools/bench.py): the real server in child processes on
loopback, driven by wrk (a C load generator: a Python one on the same two cores would be the
bottleneck and flatter the server), and a bare Tornado handler measured the same way (the ceiling).

Figures count only 2xx answers; the non-2xx count of every run is reported beside it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

import bench_grants  # tools/, beside this file
import bench_prototype
from sqlalchemy import insert, select
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from lbauth.clock import SystemClock
from lbauth.core.accounts import accounts, users
from lbauth.core.clients import apps, outbox
from lbauth.core.crypto import opaque
from lbauth.core.crypto.masterkey import load_master_keys
from lbauth.core.oauth.authorization.codes import issue_code
from lbauth.core.oauth.authorization.endpoint import load_client
from lbauth.core.oauth.authorization.request import check_api_request
from lbauth.handlers.operator_json import created_app_json
from lbauth.settings import load as load_settings
from lbauth.storage import migrate
from lbauth.storage.db import open_database
from lbauth.storage.models import authorization_codes, grants, subjects
from lbauth.storage.records import Authentication, OpenIdDetails
from lbauth.storage.repo import users as users_repo

ROOT = Path(__file__).resolve().parent.parent
REDIRECT = "https://bench.example/cb"
OPENID_SCOPES = ["openid", "profile", "email", "userinfo"]  # an OpenID grant: its exchange signs an ID token
PKCE_VERIFIER = "bench-verifier-" + "v" * 43  # RFC 7636 4.1: 43 to 128 characters
PKCE_CHALLENGE = base64.urlsafe_b64encode(hashlib.sha256(PKCE_VERIFIER.encode()).digest()).rstrip(b"=").decode()
PUBLIC_CONNECTIONS = 32  # the public refresh run's: one rotating token each
PUBLIC_TOKENS = PUBLIC_CONNECTIONS + 8  # and spares: wrk builds (and drops) a request per thread to check the script

CEILING_SERVER = r"""
import os, socket, sys, asyncio
import tornado.web, tornado.httpserver, tornado.netutil
port, workers = int(sys.argv[1]), int(sys.argv[2])
class Small(tornado.web.RequestHandler):
    def get(self):
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(b'{"code":0,"data":{"status":"ok"}}')
for _ in range(workers - 1):
    if os.fork() == 0:
        break
async def main():
    sockets = tornado.netutil.bind_sockets(port, "127.0.0.1", reuse_port=True)
    server = tornado.httpserver.HTTPServer(tornado.web.Application([("/", Small)]))
    server.add_sockets(sockets)
    await asyncio.Event().wait()
asyncio.run(main())
"""

# wrk scripts. Each thread gets its own Lua state; `id` is set per thread in setup().
COMMON_LUA = r"""
local threads = {}
local counter = 0
function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
  table.insert(threads, thread)
end
"""

EXCHANGE_LUA = COMMON_LUA + r"""
local codes, i = {}, 0
function init(args)
  for line in io.lines(args[1] .. "." .. id) do codes[#codes + 1] = line end
end
function request()
  i = i + 1
  local code = codes[i] or codes[#codes]
  return wrk.format("POST", "/api/oauth/token/code", {["Content-Type"] = "application/x-www-form-urlencoded"},
    "grant_type=authorization_code&code=" .. code .. "&" .. args_tail)
end
"""

# A public client's refresh tokens rotate (contract 17): each answer names the next token, and a
# token sent twice is refused. Each thread starts with one token per connection (a queue): a request
# takes one, its answer puts the successor back.
ROTATE_LUA = COMMON_LUA + r"""
local queue = {}
function init(args)
  for line in io.lines(args[1] .. "." .. id) do queue[#queue + 1] = line end
end
function request()
  -- nil only when wrk checks the script in its main Lua state, before any init()
  local token = table.remove(queue, 1) or ""
  return wrk.format("POST", "/oauth/token", {["Content-Type"] = "application/x-www-form-urlencoded"},
    "grant_type=refresh_token&refresh_token=" .. token .. "&client_id=" .. client_id)
end
function response(status, headers, body)
  local token = body:match('"refresh_token":"([^"]+)"')
  if token then table.insert(queue, token) end
end
"""

FLOW_LUA = COMMON_LUA + r"""
local queue, flows = {}, 0
function request()
  local nxt = table.remove(queue, 1)
  if nxt then return nxt end
  return wrk.format("POST", "/api/oauth/authorize/external",
    {["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. user_token}, authorize_body)
end
function response(status, headers, body)
  if status ~= 200 then return end
  local code = body:match('"code":"(lba_ac_[^"]+)"')
  if code then
    table.insert(queue, wrk.format("POST", "/api/oauth/token/code",
      {["Content-Type"] = "application/x-www-form-urlencoded"},
      "grant_type=authorization_code&code=" .. code .. "&" .. exchange_tail))
    return
  end
  local at = body:match('"accessToken":"([^"]+)"')
  if at then
    table.insert(queue, wrk.format("GET", "/api/auth/me", {["Authorization"] = "Bearer " .. at}))
    return
  end
  if body:find('"appScopedUserId"', 1, true) then flows = flows + 1; wrk.thread:set("flows", flows) end
end
function done(summary, latency, requests)
  local total = 0
  for _, t in ipairs(threads) do total = total + (t:get("flows") or 0) end
  io.write("FLOWS " .. total .. "\n")
end
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_wrk() -> str:
    found = shutil.which("wrk")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], check=False, capture_output=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        if not shutil.which("wrk"):
            subprocess.run(["apt-get", "update", "-qq"], check=False, capture_output=True)
            subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], check=False, capture_output=True,
                           env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    found = shutil.which("wrk")
    if not found:
        raise SystemExit("make bench needs wrk (Debian package `wrk`): apt-get install wrk")
    return found


def wait_healthy(url: str, proc: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310 - loopback
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{url} did not answer")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


_REQUESTS = re.compile(r"(\d+) requests in ([\d.]+)(ms|s|m)\b")
_NON2XX = re.compile(r"Non-2xx or 3xx responses: (\d+)")
_PERCENTILE = re.compile(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$", re.M)
_ERRORS = re.compile(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)")


def _ms(value: str, unit: str) -> float:
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def run_wrk(wrk: str, url: str, seconds: int, connections: int, script: str | None = None,
            script_args: list[str] | None = None) -> dict:
    cmd = [wrk, "-t2", f"-c{connections}", f"-d{seconds}s", "--latency", url]
    if script:
        cmd[1:1] = ["-s", script]
    out = subprocess.run([*cmd, *(["--", *script_args] if script_args else [])], capture_output=True, text=True,
                         check=True).stdout
    total, duration, unit = _REQUESTS.search(out).groups()
    duration_s = float(duration) * {"ms": 0.001, "s": 1, "m": 60}[unit]
    non2xx = int(_NON2XX.search(out).group(1)) if _NON2XX.search(out) else 0
    errors = sum(int(x) for x in _ERRORS.search(out).groups()) if _ERRORS.search(out) else 0
    percentiles = {p: _ms(v, u) for p, v, u in _PERCENTILE.findall(out)}
    flows = re.search(r"FLOWS (\d+)", out)
    found = {"rps": round((int(total) - non2xx) / duration_s), "total_rps": round(int(total) / duration_s),
             "non2xx": non2xx, "socket_errors": errors,
             "p50_ms": round(percentiles.get("50", 0), 2), "p99_ms": round(percentiles.get("99", 0), 2),
             "flows_per_s": round(int(flows.group(1)) / duration_s) if flows else None}
    shared = re.search(r"SHARED (\d+)", out)  # the many-grants runs (tools/bench_grants.py)
    if shared:
        found["shared_grant_requests"] = int(shared.group(1))
    return found


def ceiling(wrk: str, workers: int, seconds: int) -> dict:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", CEILING_SERVER, str(port), str(workers)], start_new_session=True)
    try:
        wait_healthy(f"http://127.0.0.1:{port}/", proc)
        return run_wrk(wrk, f"http://127.0.0.1:{port}/", seconds, 64)
    finally:
        stop(proc)


class Deployment:
    """One lbauth deployment for the bench: a database, seeded, and `workers` server processes."""

    def __init__(self, backend: str, workers: int, data_dir: Path, pg_url: str) -> None:
        self.backend, self.workers, self.data_dir = backend, workers, data_dir
        if backend == "sqlite":
            self.database_url = f"sqlite+aiosqlite:///{data_dir / 'bench.db'}"
        else:
            self.pg_admin = pg_url
            self.database_url = make_url(pg_url).set(database=f"lbauth_bench_{os.getpid()}").render_as_string(
                hide_password=False)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("LBAUTH_")}
        self.env.update(LBAUTH_DATABASE_URL=self.database_url, LBAUTH_DATA_DIR=str(data_dir),
                        LBAUTH_PORT=str(self.port), LBAUTH_WORKERS=str(workers), LBAUTH_LOG_LEVEL="WARNING",
                        LBAUTH_RATE_LIMITS="off", LBAUTH_ENV="development", LBAUTH_BASE_URL=self.url)
        self.proc: subprocess.Popen | None = None

    async def create_database(self) -> None:
        if self.backend == "postgresql":
            import asyncpg
            name = make_url(self.database_url).database
            admin = await asyncpg.connect(make_url(self.pg_admin).set(drivername="postgresql")
                                          .render_as_string(hide_password=False))
            try:
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                await admin.execute(f'CREATE DATABASE "{name}"')
            finally:
                await admin.close()
        db = open_database(self.database_url)
        try:
            await migrate.upgrade(db)
        finally:
            await db.close()

    async def drop_database(self) -> None:
        if self.backend == "postgresql":
            import asyncpg
            admin = await asyncpg.connect(make_url(self.pg_admin).set(drivername="postgresql")
                                          .render_as_string(hide_password=False))
            try:
                await admin.execute(f'DROP DATABASE IF EXISTS "{make_url(self.database_url).database}" WITH (FORCE)')
            finally:
                await admin.close()

    def start(self) -> None:
        log = open(self.data_dir / f"server-{self.backend}.log", "ab")  # noqa: SIM115 - kept for the child
        self.proc = subprocess.Popen([sys.executable, "-m", "lbauth", "serve"], cwd=ROOT, env=self.env,
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_healthy(self.url + "/healthz", self.proc)

    def stop(self) -> None:
        if self.proc:
            stop(self.proc)

    async def seed(self, codes_per_thread: int, openid_codes: bool = True) -> dict:
        """A user, an app, a grant, one token set, and codes to redeem (written straight to the
        database: issuing 100,000 codes over HTTP would take longer than the run); `openid_codes`
        False: plain codes only."""
        settings = load_settings({"database_url": self.database_url, "data_dir": str(self.data_dir)}, environ={})
        clock = SystemClock()
        db = open_database(self.database_url)
        try:
            email = f"bench-{secrets.token_hex(4)}@example.com"
            await users.create_user(db, clock, email=email, name="Bench", password="harbour-lights")
            operator = apps.Apps(db, clock, lambda: load_master_keys(settings), apps.AppPolicy(development=True))
            app = await operator.create(name="Bench", owner_email=email, redirect_uris=[REDIRECT])
            session = await accounts.sign_in(db, clock, 86400, email, "harbour-lights")
            row = await load_client(db, app.client_id, REDIRECT)
            request = check_api_request(row, REDIRECT, OPENID_SCOPES, None, None, None)
            user_id = (await db.read(users_repo.by_email, email)).id
            now = int(time.time())
            await issue_code(db, clock, request, user_id, 3600, OpenIdDetails("RS256", None, session.session_id),
                             Authentication(auth_time=now, amr="pwd"))
            grant_id, asu = await db.read(lambda c: c.execute(
                select(grants.c.id, subjects.c.asu).join(subjects, subjects.c.user_id == grants.c.user_id)
                .where(grants.c.user_id == user_id)).one())
            codes: dict[str, list[list[str]]] = {"plain": [], "RS256": [], "ES256": []}
            openid = {"scopes": OPENID_SCOPES, "nonce": "bench-nonce", "auth_time": now,
                      "session_id": session.session_id}
            for kind, extra in (("plain", {"scopes": ["userinfo"]}), ("RS256", {**openid, "id_token_alg": "RS256"}),
                                ("ES256", {**openid, "id_token_alg": "ES256"})):
                for _ in range(2 if openid_codes or kind == "plain" else 0):
                    plain = [opaque.new_secret(opaque.CODE) for _n in range(codes_per_thread)]
                    rows = [dict(code_hash=opaque.digest(c), app_id=row.id, user_id=user_id, grant_id=grant_id,
                                 asu=asu, redirect_uri=REDIRECT, code_challenge=None, created_at=now,
                                 expires_at=now + 3600, **extra) for c in plain]
                    for start in range(0, len(rows), 5000):
                        chunk = rows[start:start + 5000]
                        await db.transaction(lambda c, chunk=chunk: c.execute(insert(authorization_codes), chunk))
                    codes[kind].append(plain)
            public = await operator.create(name="Bench agent", owner_email=email, redirect_uris=[REDIRECT],
                                           public=True)
            public_row = await load_client(db, public.client_id, REDIRECT)
            await issue_code(db, clock, check_api_request(
                public_row, REDIRECT, ["userinfo"], None, PKCE_CHALLENGE, "S256"), user_id, 3600)
            public_grant, public_asu = await db.read(lambda c: c.execute(
                select(grants.c.id, subjects.c.asu).join(subjects, (subjects.c.user_id == grants.c.user_id)
                                                         & (subjects.c.app_id == grants.c.app_id))
                .where(grants.c.app_id == public_row.id)).one())
            public_codes = [opaque.new_secret(opaque.CODE) for _n in range(PUBLIC_TOKENS)]
            await db.transaction(lambda c: c.execute(insert(authorization_codes), [
                dict(code_hash=opaque.digest(c), app_id=public_row.id, user_id=user_id, grant_id=public_grant,
                     asu=public_asu, redirect_uri=REDIRECT, code_challenge=PKCE_CHALLENGE, created_at=now,
                     expires_at=now + 3600, scopes=["userinfo"]) for c in public_codes]))
        finally:
            await db.close()
        return {"public_client_id": public.client_id, "public_codes": public_codes,
                "client_id": app.client_id, "client_secret": app.client_secret, "user_token": session.token,
                "codes": codes["plain"], "openid_codes": codes["RS256"], "openid_es256_codes": codes["ES256"],
                "app_id": row.id}


def public_refresh_tokens(url: str, seed: dict) -> list[str]:
    """The public app's codes redeemed at /oauth/token (PKCE, `client_id` only): one refresh token each."""
    tokens = []
    for code in seed["public_codes"]:
        body = urlencode({"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT,
                          "client_id": seed["public_client_id"], "code_verifier": PKCE_VERIFIER}).encode()
        req = urllib.request.Request(url + "/oauth/token", data=body, method="POST",  # noqa: S310
                                     headers={"Content-Type": "application/x-www-form-urlencoded"})
        with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 - loopback
            tokens.append(json.loads(r.read())["refresh_token"])
    return tokens


def token_set(url: str, seed: dict) -> dict:
    def post(path: str, body: bytes, headers: dict) -> dict:
        req = urllib.request.Request(url + path, data=body, headers=headers, method="POST")  # noqa: S310
        with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 - loopback
            return json.loads(r.read())["data"]
    code = post("/api/oauth/authorize/external",
                json.dumps({"clientId": seed["client_id"], "redirectUri": REDIRECT, "scope": ["userinfo"],
                            "state": "s"}).encode(),
                {"Content-Type": "application/json", "Authorization": f"Bearer {seed['user_token']}"})["code"]
    return post("/api/oauth/token/code", urlencode({
        "grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT, "client_id": seed["client_id"],
        "client_secret": seed["client_secret"]}).encode(), {"Content-Type": "application/x-www-form-urlencoded"})


def endpoint_runs(wrk: str, deployment: Deployment, seed: dict, seconds: int, scripts: Path) -> dict:
    """wrk against each hot path of one running deployment."""
    url = deployment.url
    tokens = token_set(url, seed)
    credentials = urlencode({"redirect_uri": REDIRECT, "client_id": seed["client_id"],
                             "client_secret": seed["client_secret"]})
    codes_file = scripts / f"codes-{deployment.backend}"
    openid_codes_file = scripts / f"openid-codes-{deployment.backend}"
    es256_codes_file = scripts / f"openid-es256-codes-{deployment.backend}"
    for name, threads in ((codes_file, seed["codes"]), (openid_codes_file, seed["openid_codes"]),
                          (es256_codes_file, seed["openid_es256_codes"])):
        for i, codes in enumerate(threads):
            Path(f"{name}.{i}").write_text("\n".join(codes) + "\n")

    public_file = scripts / f"public-refresh-{deployment.backend}"
    public_tokens = public_refresh_tokens(url, seed)
    for i in range(2):  # wrk -t2: one file per thread, one token per connection
        Path(f"{public_file}.{i}").write_text("\n".join(public_tokens[i::2]) + "\n")

    def script(name: str, lua: str, **globals_: str) -> str:
        head = "".join(f'{k} = {json.dumps(v)}\n' for k, v in globals_.items())
        path = scripts / f"{name}.lua"
        path.write_text(head + lua)
        return str(path)

    refresh_body = refresh_form(tokens, seed)
    authorize_body = json.dumps({"clientId": seed["client_id"], "redirectUri": REDIRECT, "scope": ["userinfo"],
                                 "state": "bench"})
    static = r"""
function request()
  return wrk.format(method, path, headers, body)
end
"""
    runs = {
        "code_exchange": run_wrk(wrk, url, seconds, 32, script("exchange", EXCHANGE_LUA, args_tail=credentials),
                                 [str(codes_file)]),
        "openid_code_exchange": run_wrk(wrk, url, seconds, 32, script("exchange", EXCHANGE_LUA,
                                                                      args_tail=credentials),
                                        [str(openid_codes_file)]),
        "openid_code_exchange_es256": run_wrk(wrk, url, seconds, 32, script("exchange", EXCHANGE_LUA,
                                                                            args_tail=credentials),
                                              [str(es256_codes_file)]),
        "refresh": run_wrk(wrk, url, seconds, 32, script(
            "refresh", "headers = {['Content-Type'] = 'application/x-www-form-urlencoded'}\n" + static,
            method="POST", path="/api/oauth/token/refresh", body=refresh_body)),
        "me": run_wrk(wrk, url, seconds, 32, script(
            "me", f"headers = {{['Authorization'] = 'Bearer {tokens['accessToken']}'}}\n" + static,
            method="GET", path="/api/auth/me", body="")),
        "authorize": run_wrk(wrk, url, seconds, 32, script(
            "authorize", f"headers = {{['Content-Type'] = 'application/json', "
                         f"['Authorization'] = 'Bearer {seed['user_token']}'}}\n" + static,
            method="POST", path="/api/oauth/authorize/external", body=authorize_body)),
        "full_flow": run_wrk(wrk, url, seconds, 32, script(
            "flow", FLOW_LUA, user_token=seed["user_token"], authorize_body=authorize_body,
            exchange_tail=credentials)),
        # Last: its thousands of new rows must not weigh on the runs above (SQLite's WAL grows).
        "public_refresh": run_wrk(wrk, url, seconds, PUBLIC_CONNECTIONS, script(
            "public-refresh", ROTATE_LUA, client_id=seed["public_client_id"]), [str(public_file)]),
    }
    return runs


async def webhook_throughput(deployment: Deployment, seed: dict, count: int) -> dict:
    """Events written to the outbox, delivered by the running server to a loopback receiver."""
    import tornado.httpserver
    import tornado.netutil
    import tornado.web

    received: set[str] = set()

    class Hook(tornado.web.RequestHandler):
        def post(self) -> None:
            received.add(self.request.headers.get("X-Service-Event-Id", ""))

        def check_xsrf_cookie(self) -> None:
            pass

    sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
    server = tornado.httpserver.HTTPServer(tornado.web.Application([("/hook", Hook)]))
    server.add_sockets(sockets)
    hook = f"http://127.0.0.1:{sockets[0].getsockname()[1]}/hook"
    db = open_database(deployment.database_url)
    try:
        from sqlalchemy import update

        from lbauth.storage.models import apps as apps_table
        await db.transaction(lambda c: c.execute(update(apps_table).where(apps_table.c.id == seed["app_id"])
                                                 .values(webhook_url=hook)))
        now = int(time.time())
        started = time.monotonic()
        await db.transaction(lambda c: [outbox.write_event(c, app_id=seed["app_id"], asu=f"asu_bench_{i}",
                                                           reason=outbox.TEST_DELIVERY, now=now) for i in range(count)])
        while len(received) < count and time.monotonic() - started < 120:
            await asyncio.sleep(0.05)
        elapsed = time.monotonic() - started
    finally:
        await db.close()
        server.stop()
    return {"delivered": len(received), "per_s": round(len(received) / elapsed)}


async def statements_per_request(backend_url: str, data_dir: Path) -> dict:
    """SQL statements each endpoint sends, counted in-process on a fresh server (deterministic)."""
    import tornado.netutil
    from tornado.httpclient import AsyncHTTPClient

    from lbauth.server import start
    settings = load_settings({"database_url": backend_url, "data_dir": str(data_dir), "port": 0,
                              "rate_limits": "off", "env": "development"}, environ={})
    sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
    settings = settings.replace(base_url=f"http://127.0.0.1:{sockets[0].getsockname()[1]}",
                                issuer=f"http://127.0.0.1:{sockets[0].getsockname()[1]}",
                                audience=f"http://127.0.0.1:{sockets[0].getsockname()[1]}")
    running = await start(settings, sockets=sockets)
    for callback in running.periodic:
        callback.stop()  # nothing else may send statements while we count
    running.services.checklist.max_age = None  # with no poll, no fail-closed catch-up read either
    client = AsyncHTTPClient(force_instance=True)
    db = running.services.db
    base = settings.base_url
    try:
        clock = SystemClock()
        email = f"stmt-{secrets.token_hex(4)}@example.com"
        await users.create_user(db, clock, email=email, name="S", password="statement-pass")
        app = created_app_json(await running.services.apps.create(name="S", owner_email=email,
                                                                  redirect_uris=[REDIRECT]))
        session = await accounts.sign_in(db, clock, 3600, email, "statement-pass")

        async def call(method: str, path: str, body: bytes | None, headers: dict) -> tuple[dict, int]:
            before = db.statements
            r = await client.fetch(base + path, method=method, body=body, headers=headers, raise_error=False)
            assert r.code == 200, r.body
            return json.loads(r.body)["data"], db.statements - before

        auth_headers = {"Content-Type": "application/json", "Authorization": f"Bearer {session.token}"}
        body = json.dumps({"clientId": app["clientId"], "redirectUri": REDIRECT, "scope": ["userinfo"]}).encode()
        await call("POST", "/api/oauth/authorize/external", body, auth_headers)  # first approval creates the grant
        data, n_authorize = await call("POST", "/api/oauth/authorize/external", body, auth_headers)
        form = {"grant_type": "authorization_code", "code": data["code"], "redirect_uri": REDIRECT,
                "client_id": app["clientId"], "client_secret": app["clientSecret"]}
        tokens, n_exchange = await call("POST", "/api/oauth/token/code", urlencode(form).encode(),
                                        {"Content-Type": "application/x-www-form-urlencoded"})
        refresh = {"grant_type": "refresh_token", "refresh_token": tokens["refreshToken"],
                   "client_id": app["clientId"], "client_secret": app["clientSecret"]}
        _, n_refresh = await call("POST", "/api/oauth/token/refresh", urlencode(refresh).encode(),
                                  {"Content-Type": "application/x-www-form-urlencoded"})
        _, n_me = await call("GET", "/api/auth/me", None, {"Authorization": f"Bearer {tokens['accessToken']}"})
        openid_body = json.dumps({"clientId": app["clientId"], "redirectUri": REDIRECT, "scope": OPENID_SCOPES,
                                  "nonce": "n"}).encode()
        await call("POST", "/api/oauth/authorize/external", openid_body, auth_headers)  # extends the grant
        data, _ = await call("POST", "/api/oauth/authorize/external", openid_body, auth_headers)
        openid_tokens, n_openid_exchange = await call("POST", "/api/oauth/token/code", urlencode(
            {**form, "code": data["code"]}).encode(), {"Content-Type": "application/x-www-form-urlencoded"})
        assert openid_tokens.get("idToken"), "an OpenID exchange answers an ID token"
        public = created_app_json(await running.services.apps.create(name="P", owner_email=email,
                                                                     redirect_uris=[REDIRECT], public=True))
        data, _ = await call("POST", "/api/oauth/authorize/external", json.dumps(
            {"clientId": public["clientId"], "redirectUri": REDIRECT, "scope": ["userinfo"],
             "codeChallenge": PKCE_CHALLENGE, "codeChallengeMethod": "S256"}).encode(), auth_headers)
        form_headers = {"Content-Type": "application/x-www-form-urlencoded"}
        r = await client.fetch(base + "/oauth/token", method="POST", headers=form_headers, body=urlencode(
            {"grant_type": "authorization_code", "code": data["code"], "redirect_uri": REDIRECT,
             "client_id": public["clientId"], "code_verifier": PKCE_VERIFIER}))
        before = db.statements
        r = await client.fetch(base + "/oauth/token", method="POST", headers=form_headers, body=urlencode(
            {"grant_type": "refresh_token", "refresh_token": json.loads(r.body)["refresh_token"],
             "client_id": public["clientId"]}))
        n_public_refresh = db.statements - before
        assert json.loads(r.body)["refresh_token"], "a public client's refresh answers a new refresh token"
        before = db.statements
        running.services.tokens.check(tokens["accessToken"])
        n_verify = db.statements - before
    finally:
        client.close()
        await running.stop()
    return {"authorize": n_authorize, "code_exchange": n_exchange, "openid_code_exchange": n_openid_exchange,
            "refresh": n_refresh, "public_refresh": n_public_refresh, "me": n_me,
            "verify": n_verify, "full_flow": n_authorize + n_exchange + n_me}


def many_grants_runs(wrk: str, backend: str, workers: int, pg_url: str, seconds: int, grants_count: int,
                     codes_each: int) -> dict:
    """Authorize, the code exchange and refresh with `grants_count` users and apps, no two requests
    in flight on one grant (tools/bench_grants.py), on a deployment of their own: the runs above
    keep their database as it was. Authorize first, within a minute of the sign-ins: its sessions'
    last use (contract 16: written at most once a minute) is not written during the run."""
    with tempfile.TemporaryDirectory(prefix=f"lbauth-bench-grants-{backend}-") as tmp:
        deployment = Deployment(backend, workers, Path(tmp), pg_url)
        asyncio.run(deployment.create_database())
        try:
            slots = asyncio.run(bench_grants.seed(deployment.database_url, Path(tmp), grants_count, codes_each))
            deployment.start()
            try:
                scripts = {}
                for endpoint in ("authorize", "code_exchange", "refresh"):
                    path, content_type = bench_grants.ROUTES[endpoint]
                    grants_file = Path(tmp) / f"grants-{endpoint}"
                    bench_grants.write_grants(grants_file, endpoint, slots)
                    script = Path(tmp) / f"{endpoint}-grants.lua"
                    script.write_text(f"method, path, content_type = 'POST', {json.dumps(path)}, "
                                      f"{json.dumps(content_type)}\n" + bench_grants.MANY_LUA)
                    scripts[endpoint] = [str(script), [str(grants_file)]]
                # Unmeasured, 2 s of authorize: a fresh server opens its pooled connections on demand
                # (32 at once on a loaded machine can outlast the connect timeout: 503), and a worker
                # reads each user token's session once before caching it. Its codes are not redeemed.
                run_wrk(wrk, deployment.url, 2, 32, *scripts["authorize"])
                return {endpoint + bench_grants.SUFFIX: run_wrk(wrk, deployment.url, seconds, 32, *script)
                        for endpoint, script in scripts.items()}
            finally:
                deployment.stop()
        finally:
            asyncio.run(deployment.drop_database())


def run(quick: bool, workers: int, backends: list[str], pg_url: str, grants_count: int = 1000) -> dict:
    wrk = ensure_wrk()
    seconds = 5 if quick else 10
    results: dict = {"workers": workers, "load_generator": "wrk 4.1 (-t2, 32-64 connections), same machine",
                     "run_seconds": seconds}
    if grants_count:
        results["grants"] = grants_count  # the many-grants runs' users and apps
    results["ceiling"] = ceiling(wrk, workers, seconds)
    results["ceiling_rps"] = results["ceiling"]["rps"]
    per_backend: dict = {}
    statements: dict = {}
    webhooks: dict = {}
    for backend in backends:
        with tempfile.TemporaryDirectory(prefix=f"lbauth-bench-{backend}-") as tmp:
            data_dir = Path(tmp)
            deployment = Deployment(backend, workers, data_dir, pg_url)
            asyncio.run(deployment.create_database())
            try:
                seed = asyncio.run(deployment.seed(codes_per_thread=40_000 if not quick else 20_000))
                deployment.start()
                try:
                    per_backend[backend] = endpoint_runs(wrk, deployment, seed, seconds, data_dir)
                    webhooks[backend] = asyncio.run(webhook_throughput(deployment, seed, 500 if quick else 2000))
                finally:
                    deployment.stop()
                statements[backend] = asyncio.run(statements_per_request(deployment.database_url, data_dir))
            finally:
                asyncio.run(deployment.drop_database())
        if grants_count:
            per_backend[backend].update(many_grants_runs(wrk, backend, workers, pg_url, seconds, grants_count,
                                                         2 * (40_000 if not quick else 20_000) // grants_count))
    for key, name in (("code_exchange_rps", "code_exchange"), ("openid_code_exchange_rps", "openid_code_exchange"),
                      ("refresh_rps", "refresh"), ("public_refresh_rps", "public_refresh"), ("me_rps", "me"),
                      ("authorize_rps", "authorize")):
        results[key] = {b: per_backend[b][name]["rps"] for b in per_backend}
    for name in (n + bench_grants.SUFFIX for n in bench_grants.ENDPOINTS):
        if any(name in runs for runs in per_backend.values()):
            results[name + "_rps"] = {b: runs[name]["rps"] for b, runs in per_backend.items() if name in runs}
    results["full_flow_rps"] = {b: per_backend[b]["full_flow"]["flows_per_s"] for b in per_backend}
    results["runs"] = per_backend
    results["statements"] = statements.get("sqlite") or next(iter(statements.values()), {})
    results["statements_by_backend"] = statements
    results["webhook_deliveries_per_s"] = {b: webhooks[b]["per_s"] for b in webhooks}
    if workers > 1 and "sqlite" in per_backend:
        results["scaling"] = worker_scaling(wrk, seconds, pg_url, per_backend["sqlite"], workers)
    if "postgresql" in backends:
        results["prototype"] = bench_prototype.compare(wrk, seconds, pg_url)
        results["postgresql_scaling"] = bench_prototype.scaling(wrk, seconds, pg_url)
    return results


def worker_scaling(wrk: str, seconds: int, pg_url: str, with_workers: dict, workers: int) -> dict:
    """Refresh (a database read and a signature per request) and /me (no database read once the
    token is known) with one worker, for the 1 -> N speed-up (SQLite)."""
    with tempfile.TemporaryDirectory(prefix="lbauth-bench-1w-") as tmp:
        deployment = Deployment("sqlite", 1, Path(tmp), pg_url)
        asyncio.run(deployment.create_database())
        seed = asyncio.run(deployment.seed(codes_per_thread=10))
        deployment.start()
        try:
            tokens = token_set(deployment.url, seed)
            me = Path(tmp) / "me.lua"
            me.write_text(f"wrk.headers['Authorization'] = 'Bearer {tokens['accessToken']}'\n")
            refresh = refresh_script(Path(tmp), tokens, seed)
            one = {"refresh": run_wrk(wrk, deployment.url + "/api/oauth/token/refresh", seconds, 32, str(refresh)),
                   "me": run_wrk(wrk, deployment.url + "/api/auth/me", seconds, 32, str(me))}
        finally:
            deployment.stop()
    return {name: {"rps_1_worker": one[name]["rps"], f"rps_{workers}_workers": with_workers[name]["rps"],
                   "speedup": round(with_workers[name]["rps"] / max(one[name]["rps"], 1), 2)}
            for name in ("refresh", "me")}


def refresh_form(tokens: dict, seed: dict) -> str:
    return urlencode({"grant_type": "refresh_token", "refresh_token": tokens["refreshToken"],
                      "client_id": seed["client_id"], "client_secret": seed["client_secret"]})


def refresh_script(directory: Path, tokens: dict, seed: dict) -> Path:
    """A wrk script that refreshes the same token over and over."""
    path = directory / "refresh.lua"
    path.write_text("wrk.method = 'POST'\nwrk.headers['Content-Type'] = 'application/x-www-form-urlencoded'\n"
                    f"wrk.body = {json.dumps(refresh_form(tokens, seed))}\n")
    return path


async def _fill(database_url: str, seed: dict, grants_count: int, tokens_count: int) -> None:
    """Bulk rows: `grants_count` users, each with a live grant on the bench app, and
    `tokens_count` refresh tokens spread over those grants."""
    from lbauth.storage.models import refresh_tokens as rt_table
    from lbauth.storage.models import users as users_table
    db = open_database(database_url)
    now = int(time.time())
    try:
        for start in range(0, grants_count, 10_000):
            ids = range(start, min(start + 10_000, grants_count))
            user_rows = [dict(id=f"usr_g{i}", email=f"g{i}@bench.example", name="G", avatar="", bio="",
                              interest_tags=[], password_hash="-", created_at=now) for i in ids]
            grant_rows = [dict(id=f"gnt_g{i}", app_id=seed["app_id"], user_id=f"usr_g{i}", scopes=["userinfo"],
                               created_at=now, updated_at=now) for i in ids]
            await db.transaction(lambda c, u=user_rows, g=grant_rows: (c.execute(insert(users_table), u),
                                                                       c.execute(insert(grants), g)))
        for start in range(0, tokens_count, 20_000):
            rows = [dict(token_hash=opaque.digest(f"growth-{i}"), app_id=seed["app_id"],
                         user_id=f"usr_g{i % grants_count}", grant_id=f"gnt_g{i % grants_count}", code_hash=None,
                         asu=f"asu_g{i}", scopes=["userinfo"], created_at=now, expires_at=now + 86400)
                    for i in range(start, min(start + 20_000, tokens_count))]
            await db.transaction(lambda c, r=rows: c.execute(insert(rt_table), r))
    finally:
        await db.close()
    # A database in steady state has been vacuumed and has planner statistics; a fresh bulk load has
    # neither yet, and autovacuum would otherwise do both during the measurement.
    engine = create_async_engine(database_url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.exec_driver_sql("VACUUM ANALYZE" if conn.dialect.name == "postgresql" else "ANALYZE")
    finally:
        await engine.dispose()


def growth(wrk: str, seconds: int, pg_url: str, backend: str, tokens_count: int, grants_count: int) -> dict:
    """Refresh latency on an empty database, then with the rows a large deployment has."""
    with tempfile.TemporaryDirectory(prefix=f"lbauth-growth-{backend}-") as tmp:
        deployment = Deployment(backend, 2, Path(tmp), pg_url)
        asyncio.run(deployment.create_database())
        try:
            seed = asyncio.run(deployment.seed(codes_per_thread=10))
            results = {}
            for phase in ("empty", "filled"):
                if phase == "filled":
                    started = time.monotonic()
                    asyncio.run(_fill(deployment.database_url, seed, grants_count, tokens_count))
                    results["fill_seconds"] = round(time.monotonic() - started)
                deployment.start()
                try:
                    tokens = token_set(deployment.url, seed)
                    path = refresh_script(Path(tmp), tokens, seed)
                    run_wrk(wrk, deployment.url + "/api/oauth/token/refresh", 2, 8, str(path))  # warm caches
                    results[phase] = run_wrk(wrk, deployment.url + "/api/oauth/token/refresh", seconds, 8, str(path))
                finally:
                    deployment.stop()
        finally:
            asyncio.run(deployment.drop_database())
    results["p50_ratio"] = round(results["filled"]["p50_ms"] / max(results["empty"]["p50_ms"], 0.001), 3)
    results["rows"] = {"refresh_tokens": tokens_count, "grants": grants_count}
    return results
