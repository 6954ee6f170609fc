"""The PostgreSQL yardstick for `make bench`: a raw-asyncpg prototype of the code exchange and of
authorize, measured in the same run as lbauth's, at 1 and 2 workers, throughput and server CPU per
request.

The prototype does each endpoint's own work with nothing around it, through lbauth's own
statements (compiled once by SQLAlchemy, sent by asyncpg from a plain asyncpg pool):

- the exchange: a Tornado handler reads the form, hashes the code, the client secret and a new
  refresh token, runs the one-statement redemption, signs an ES256 access token with PyJWT and
  writes the JSON envelope;
- authorize (the envelope API's): it reads the JSON body, finds the user token's session (read
  once per process, as lbauth caches it), reads the app, checks the redirect URI and the scopes,
  and inserts a new code under the grant that already covers the request, in one statement.

What lbauth spends beyond it is framework: units of work, the pool's admission queue, SQLAlchemy's
execution layer, the key ring, the authorization endpoint's chain, handlers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import bench_http  # tools/, beside this file (which imports this one: used at call time only)
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect

WARM_CODES = 8000  # per wrk thread, for the 2 s warm-up run

PROTOTYPE_SERVER = r"""
import asyncio, hashlib, json, os, secrets, sys, time
import asyncpg, jwt, tornado.httpserver, tornado.netutil, tornado.web
from cryptography.hazmat.primitives.asymmetric import ec

port, workers, dsn, plan_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
plans = json.loads(open(plan_file).read())
SQL, ORDER, LITERALS = plans["redeem"]["sql"], plans["redeem"]["order"], plans["redeem"]["literals"]
KEY = ec.generate_private_key(ec.SECP256R1())

def digest(value):
    return hashlib.sha256(value.encode()).hexdigest()

class Exchange(tornado.web.RequestHandler):
    def check_xsrf_cookie(self):
        pass

    async def post(self):
        form = {k: v[-1].decode() for k, v in self.request.body_arguments.items()}
        now, refresh = int(time.time()), "lba_rt_" + secrets.token_urlsafe(32)
        jti = secrets.token_urlsafe(16)
        values = {"p_code_hash": digest(form["code"]), "p_client_id": form["client_id"],
                  "p_client_secret_hash": digest(form["client_secret"]), "p_redirect_uri": form["redirect_uri"],
                  "p_challenge": None, "p_now": now, "p_access_jti": jti, "p_refresh_hash": digest(refresh),
                  "p_refresh_expires_at": now + 2592000, "p_dpop_jkt": None, "p_refresh_jkt": None, **LITERALS}
        async with self.application.pool.acquire() as conn:
            row = await conn.fetchrow(SQL, *[values[name] for name in ORDER])
        if row is None:
            self.set_status(400)
            self.finish({"code": 400, "message": "invalid_grant"})
            return
        claims = {"iss": "http://bench", "aud": "lbauth", "sub": row["user_id"], "client_id": form["client_id"],
                  "scope": " ".join(row["scopes"]), "iat": now, "exp": now + 3600, "jti": jti,
                  "gid": row["grant_id"], "asu": row["asu"]}
        token = "lba_at_" + jwt.encode(claims, KEY, algorithm="ES256", headers={"typ": "at+jwt", "kid": "k1"})
        self.set_header("Cache-Control", "no-store")
        self.finish({"code": 0, "data": {"accessToken": token, "refreshToken": refresh, "tokenType": "Bearer",
                                         "expiresIn": 3600, "scope": list(row["scopes"])}})

def run(conn, plan, values):  # one of lbauth's statements, its $n bound from values and its own literals
    values = {**values, **plan["literals"]}
    return conn.fetchrow(plan["sql"], *[values[name] for name in plan["order"]])

class Authorize(tornado.web.RequestHandler):
    sessions = {}  # user token digest -> (user id, session id, auth time): read once, as lbauth does

    def check_xsrf_cookie(self):
        pass

    async def post(self):
        body, token = json.loads(self.request.body), self.request.headers["Authorization"][len("Bearer "):]
        key, now = digest(token), int(time.time())
        async with self.application.pool.acquire() as conn:
            session = self.sessions.get(key)
            if session is None:
                row = await conn.fetchrow("SELECT user_id, id, authenticated_at FROM sessions WHERE token_hash = $1",
                                          key)
                session = self.sessions[key] = (row["user_id"], row["id"], row["authenticated_at"])
            app = await run(conn, plans["app"], {"client_id": body["clientId"]})
            if (app is None or body["redirectUri"] not in json.loads(app["redirect_uris"])
                    or not set(body["scope"]) <= set(json.loads(app["scopes"]))):
                self.set_status(400)
                self.finish({"code": 400, "message": "invalid_request"})
                return
            code = "lba_ac_" + secrets.token_urlsafe(32)
            row = await run(conn, plans["authorize"], {
                "p_user_id": session[0], "p_app_id": app["id"], "p_code_hash": digest(code),
                "p_redirect_uri": body["redirectUri"], "p_scopes": json.dumps(body["scope"]), "p_challenge": None,
                "p_now": now, "p_expires_at": now + 300, "p_auth_time": session[2], "p_amr": "pwd",
                "p_dpop_jkt": None, "p_id_token_alg": None, "p_nonce": None, "p_session_id": None})
        if row is None:
            self.set_status(400)
            self.finish({"code": 400, "message": "consent_required"})
            return
        self.finish({"code": 0, "data": {"code": code, "state": body.get("state", "")}})

for _ in range(workers - 1):
    if os.fork() == 0:
        break

class Health(tornado.web.RequestHandler):
    def get(self):
        self.finish("ok")

async def main():
    app = tornado.web.Application([("/api/oauth/token/code", Exchange), ("/api/oauth/authorize/external", Authorize),
                                   ("/healthz", Health)])
    app.pool = await asyncpg.create_pool(dsn, min_size=16, max_size=16)
    sockets = tornado.netutil.bind_sockets(port, "127.0.0.1", reuse_port=True)
    tornado.httpserver.HTTPServer(app).add_sockets(sockets)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def plans() -> dict:
    """lbauth's own statements as asyncpg runs them, each its SQL with $n parameters and which
    named value each $n takes: the one-statement redemption and the code under a covering grant
    (storage/repo/codes.py), and the app by client id (storage/repo/apps.py)."""
    from lbauth.storage.repo.apps import _BY_CLIENT_ID
    from lbauth.storage.repo.codes import _FROM_COVERING_GRANT, _REDEEM_IN_ONE
    return {"redeem": _plan(_REDEEM_IN_ONE), "authorize": _plan(_FROM_COVERING_GRANT["postgresql"]),
            "app": _plan(_BY_CLIENT_ID)}


def _plan(statement) -> dict:
    compiled = statement.compile(dialect=asyncpg_dialect())
    # The statement's own literals (DPOP_ANY_KEY, say) are bound too: their values come with it.
    literals = {name: value for name, value in compiled.params.items()
                if not name.startswith("p_") and name != "client_id"}
    return {"sql": compiled.string, "order": list(compiled.positiontup), "literals": literals}


def cpu_seconds(group: int) -> tuple[float, float]:
    """User and system CPU of every live process in a process group (the server and its workers),
    and of PostgreSQL's processes (on this machine: the benchmark's database)."""
    tick, ours, postgres = os.sysconf("SC_CLK_TCK"), 0, 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            name, stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)
        except OSError:
            continue
        fields = stat.split()
        used = int(fields[11]) + int(fields[12])  # utime, stime
        if int(fields[2]) == group:  # pgrp
            ours += used
        elif name.split("(", 1)[1].startswith("postgres"):
            postgres += used
    return ours / tick, postgres / tick


def measured(wrk: str, proc: subprocess.Popen, url: str, seconds: int, script: str,
             codes: str | None) -> dict:
    """One wrk run, with the server's and PostgreSQL's CPU per 2xx answer."""
    before = cpu_seconds(proc.pid)
    run = bench_http.run_wrk(wrk, url, seconds, 32, script, [codes] if codes else None)
    after = cpu_seconds(proc.pid)
    answered = max(run["rps"] * seconds, 1)
    run["cpu_us_per_request"] = round((after[0] - before[0]) * 1e6 / answered)
    run["postgres_cpu_us_per_request"] = round((after[1] - before[1]) * 1e6 / answered)
    return run


def compare(wrk: str, seconds: int, pg_url: str, rounds: int = 3) -> dict:
    """lbauth's code exchange and the prototype's, at 1 and 2 workers, on one seeded database,
    `rounds` times in alternation (a shared machine's speed drifts): the median run of each for
    throughput and CPU per request, and lbauth's ratios to the prototype."""
    configs = [(who, workers) for workers in (1, 2) for who in ("lbauth", "prototype")]
    runs: dict[str, list[dict]] = {f"{who}_{workers}w": [] for who, workers in configs}
    with tempfile.TemporaryDirectory(prefix="lbauth-bench-prototype-") as tmp:
        data_dir = Path(tmp)
        deployment = bench_http.Deployment("postgresql", 1, data_dir, pg_url)
        bench_http.asyncio.run(deployment.create_database())
        try:
            per_run = seconds * 4000 + WARM_CODES  # per wrk thread: 8,000 req/s at most, 2 threads
            seed = bench_http.asyncio.run(deployment.seed(codes_per_thread=rounds * len(configs) * per_run,
                                                          openid_codes=False))
            plan_file = data_dir / "plan.json"
            plan_file.write_text(json.dumps(plans()))
            credentials = bench_http.urlencode({"redirect_uri": bench_http.REDIRECT, "client_id": seed["client_id"],
                                                "client_secret": seed["client_secret"]})
            script = data_dir / "exchange.lua"
            script.write_text(f"args_tail = {json.dumps(credentials)}\n" + bench_http.EXCHANGE_LUA)
            dsn = bench_http.make_url(deployment.database_url).set(drivername="postgresql").render_as_string(
                hide_password=False)
            for index, (who, workers) in enumerate(configs * rounds):
                codes_file = data_dir / f"codes-{index}"
                for i, thread in enumerate(seed["codes"]):  # each run redeems codes no other run used
                    part = thread[index * per_run:(index + 1) * per_run]
                    Path(f"{codes_file}-warm.{i}").write_text("\n".join(part[:WARM_CODES]) + "\n")
                    Path(f"{codes_file}.{i}").write_text("\n".join(part[WARM_CODES:]) + "\n")
                if who == "lbauth":
                    deployment.env["LBAUTH_WORKERS"] = str(workers)
                    deployment.start()
                    proc, url = deployment.proc, deployment.url
                else:
                    port = bench_http.free_port()
                    url = f"http://127.0.0.1:{port}"
                    proc = subprocess.Popen([sys.executable, "-c", PROTOTYPE_SERVER, str(port), str(workers), dsn,
                                             str(plan_file)], start_new_session=True)
                    bench_http.wait_healthy(url + "/healthz", proc)
                try:
                    # Warm: pooled connections opened, statements prepared, caches filled.
                    bench_http.run_wrk(wrk, url, 2, 32, str(script), [f"{codes_file}-warm"])
                    runs[f"{who}_{workers}w"].append(measured(wrk, proc, url, seconds, str(script),
                                                              str(codes_file)))
                finally:
                    bench_http.stop(proc)
        finally:
            bench_http.asyncio.run(deployment.drop_database())
    results: dict = {"rounds": rounds}
    for name, found in runs.items():
        by_rps = sorted(found, key=lambda run: run["rps"])
        median = dict(by_rps[len(by_rps) // 2])
        median["cpu_us_per_request"] = sorted(run["cpu_us_per_request"] for run in found)[len(found) // 2]
        median["non2xx"] = sum(run["non2xx"] for run in found)
        median["all_rps"] = [run["rps"] for run in found]
        median["all_cpu_us_per_request"] = [run["cpu_us_per_request"] for run in found]
        results[name] = median
    for workers in (1, 2):
        ours, theirs = results[f"lbauth_{workers}w"], results[f"prototype_{workers}w"]
        results[f"throughput_ratio_{workers}w"] = round(ours["rps"] / max(theirs["rps"], 1), 2)
        results[f"cpu_ratio_{workers}w"] = round(ours["cpu_us_per_request"] / max(theirs["cpu_us_per_request"], 1), 2)
    for who in ("lbauth", "prototype"):
        results[f"{who}_scaling"] = round(results[f"{who}_2w"]["rps"] / max(results[f"{who}_1w"]["rps"], 1), 2)
    return results


def scaling(wrk: str, seconds: int, pg_url: str, rounds: int = 3) -> dict:
    """Authorize and refresh on PostgreSQL with 1 and 2 workers, and the prototype's authorize
    beside them, `rounds` times in alternation: the median req/s of each, its server CPU per
    request, and the speed-up from 1 to 2 workers."""
    runs: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="lbauth-bench-scaling-") as tmp:
        data_dir = Path(tmp)
        deployment = bench_http.Deployment("postgresql", 1, data_dir, pg_url)
        bench_http.asyncio.run(deployment.create_database())
        try:
            seed = bench_http.asyncio.run(deployment.seed(codes_per_thread=10, openid_codes=False))
            plan_file = data_dir / "plan.json"
            plan_file.write_text(json.dumps(plans()))
            dsn = bench_http.make_url(deployment.database_url).set(drivername="postgresql").render_as_string(
                hide_password=False)
            authorize = data_dir / "authorize.lua"
            authorize.write_text(
                "wrk.method = 'POST'\nwrk.headers['Content-Type'] = 'application/json'\n"
                f"wrk.headers['Authorization'] = 'Bearer {seed['user_token']}'\n"
                f"wrk.body = {json.dumps(json.dumps({'clientId': seed['client_id'], 'redirectUri': bench_http.REDIRECT, 'scope': ['userinfo'], 'state': 'bench'}))}\n")  # noqa: E501
            refresh = None
            for _ in range(rounds):
                for workers in (1, 2):
                    for who in ("lbauth", "prototype"):
                        if who == "lbauth":
                            deployment.env["LBAUTH_WORKERS"] = str(workers)
                            deployment.start()
                            proc, base = deployment.proc, deployment.url
                            if refresh is None:
                                refresh = bench_http.refresh_script(data_dir, bench_http.token_set(base, seed), seed)
                            endpoints = (("authorize", "/api/oauth/authorize/external", authorize),
                                         ("refresh", "/api/oauth/token/refresh", refresh))
                        else:
                            port = bench_http.free_port()
                            base = f"http://127.0.0.1:{port}"
                            proc = subprocess.Popen([sys.executable, "-c", PROTOTYPE_SERVER, str(port), str(workers),
                                                     dsn, str(plan_file)], start_new_session=True)
                            bench_http.wait_healthy(base + "/healthz", proc)
                            endpoints = (("prototype_authorize", "/api/oauth/authorize/external", authorize),)
                        try:
                            for name, path, script in endpoints:
                                bench_http.run_wrk(wrk, base + path, 1, 32, str(script))  # warm
                                run = measured(wrk, proc, base + path, seconds, str(script), None)
                                if run["non2xx"]:
                                    raise SystemExit(f"{name}: {run['non2xx']} non-2xx answers")
                                runs.setdefault(f"{name}_{workers}w", []).append(run)
                        finally:
                            if who == "lbauth":
                                deployment.stop()
                            else:
                                bench_http.stop(proc)
        finally:
            bench_http.asyncio.run(deployment.drop_database())
    results: dict = {"rounds": rounds, "runs": {name: [run["rps"] for run in found] for name, found in runs.items()}}
    for name in ("authorize", "refresh", "prototype_authorize"):
        one, two = (sorted(runs[f"{name}_{w}w"], key=lambda run: run["rps"])[rounds // 2] for w in (1, 2))
        results[name] = {"rps_1_worker": one["rps"], "rps_2_workers": two["rps"],
                         "speedup": round(two["rps"] / max(one["rps"], 1), 2)}
        for key in ("cpu_us_per_request", "postgres_cpu_us_per_request"):  # medians
            for w, label in ((1, "1_worker"), (2, "2_workers")):
                results[name][f"{key}_{label}"] = sorted(run[key] for run in runs[f"{name}_{w}w"])[rounds // 2]
    return results
