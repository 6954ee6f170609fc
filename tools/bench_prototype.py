"""The PostgreSQL yardstick for `make bench`: a raw-asyncpg prototype of the code exchange, measured
in the same run as lbauth's, at 1 and 2 workers, throughput and server CPU per request.

The prototype does the exchange's own work with nothing around it: a Tornado handler reads the
form, hashes the code, the client secret and a new refresh token, runs lbauth's own redeem
statement (compiled once by SQLAlchemy, sent by asyncpg from a plain asyncpg pool), signs an ES256
access token with PyJWT and writes the JSON envelope. What lbauth spends beyond it is framework:
units of work, the pool's admission queue, SQLAlchemy's execution layer, the key ring, handlers.
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
plan = json.loads(open(plan_file).read())
SQL, ORDER, LITERALS = plan["sql"], plan["order"], plan["literals"]
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

for _ in range(workers - 1):
    if os.fork() == 0:
        break

class Health(tornado.web.RequestHandler):
    def get(self):
        self.finish("ok")

async def main():
    app = tornado.web.Application([("/api/oauth/token/code", Exchange), ("/healthz", Health)])
    app.pool = await asyncpg.create_pool(dsn, min_size=16, max_size=16)
    sockets = tornado.netutil.bind_sockets(port, "127.0.0.1", reuse_port=True)
    tornado.httpserver.HTTPServer(app).add_sockets(sockets)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def redeem_plan() -> dict:
    """lbauth's one-statement redeem (storage/repo/codes.py) as asyncpg runs it: its SQL with $n
    parameters, and which named value each $n takes."""
    from lbauth.storage.repo.codes import _REDEEM_IN_ONE
    compiled = _REDEEM_IN_ONE.compile(dialect=asyncpg_dialect())
    # The statement's own literals (DPOP_ANY_KEY, say) are bound too: their values come with it.
    literals = {name: value for name, value in compiled.params.items() if not name.startswith("p_")}
    return {"sql": compiled.string, "order": list(compiled.positiontup), "literals": literals}


def cpu_seconds(group: int) -> float:
    """User and system CPU of every live process in a process group (the server and its workers)."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group:  # pgrp
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def measured(wrk: str, proc: subprocess.Popen, url: str, seconds: int, script: str,
             codes: str) -> dict:
    """One wrk run of the exchange, with the server's CPU per 2xx answer."""
    before = cpu_seconds(proc.pid)
    run = bench_http.run_wrk(wrk, url, seconds, 32, script, [codes])
    used = cpu_seconds(proc.pid) - before
    run["cpu_us_per_request"] = round(used * 1e6 / max(run["rps"] * seconds, 1))
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
            plan_file.write_text(json.dumps(redeem_plan()))
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
    """Authorize and refresh on PostgreSQL with 1 and 2 workers, `rounds` times in alternation:
    the median req/s of each and the speed-up from 1 to 2 workers."""
    runs: dict[str, list[int]] = {}
    with tempfile.TemporaryDirectory(prefix="lbauth-bench-scaling-") as tmp:
        data_dir = Path(tmp)
        deployment = bench_http.Deployment("postgresql", 1, data_dir, pg_url)
        bench_http.asyncio.run(deployment.create_database())
        try:
            seed = bench_http.asyncio.run(deployment.seed(codes_per_thread=10, openid_codes=False))
            authorize = data_dir / "authorize.lua"
            authorize.write_text(
                "wrk.method = 'POST'\nwrk.headers['Content-Type'] = 'application/json'\n"
                f"wrk.headers['Authorization'] = 'Bearer {seed['user_token']}'\n"
                f"wrk.body = {json.dumps(json.dumps({'clientId': seed['client_id'], 'redirectUri': bench_http.REDIRECT, 'scope': ['userinfo'], 'state': 'bench'}))}\n")  # noqa: E501
            refresh = None
            for _ in range(rounds):
                for workers in (1, 2):
                    deployment.env["LBAUTH_WORKERS"] = str(workers)
                    deployment.start()
                    try:
                        if refresh is None:
                            refresh = bench_http.refresh_script(data_dir, bench_http.token_set(deployment.url, seed),
                                                                seed)
                        for name, path, script in (("authorize", "/api/oauth/authorize/external", authorize),
                                                   ("refresh", "/api/oauth/token/refresh", refresh)):
                            url = deployment.url + path
                            bench_http.run_wrk(wrk, url, 1, 32, str(script))  # warm
                            run = bench_http.run_wrk(wrk, url, seconds, 32, str(script))
                            if run["non2xx"]:
                                raise SystemExit(f"{name}: {run['non2xx']} non-2xx answers")
                            runs.setdefault(f"{name}_{workers}w", []).append(run["rps"])
                    finally:
                        deployment.stop()
        finally:
            bench_http.asyncio.run(deployment.drop_database())
    results: dict = {"rounds": rounds, "runs": runs}
    for name in ("authorize", "refresh"):
        one, two = (sorted(runs[f"{name}_{w}w"])[rounds // 2] for w in (1, 2))
        results[name] = {"rps_1_worker": one, "rps_2_workers": two, "speedup": round(two / max(one, 1), 2)}
    return results
