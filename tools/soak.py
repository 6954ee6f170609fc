#!/usr/bin/env python3
"""`make soak`: sustained mixed traffic against the real server (issue 8).

For each backend (SQLite, then PostgreSQL), with 2 workers: wrk first finds the maximum rate of
the mix, then drives the mix at 80 % of it (each connection pauses between requests) for
`--minutes` one-minute rounds. The mix, per user flow: authorize, exchange, /me, refresh, /me,
and for one flow in ten, revoking the refresh token (RFC 7009; every revocation keeps a check-list
entry in every worker until the grant's access tokens expire, so revoking every flow would grow
the check-list by design). It checks:

- zero errors: every answer 2xx, no socket error;
- memory: the workers' resident memory at the end within 10 % of the first sample taken after
  the first round (warm caches);
- latency: the last round's p99 within 1.5x the first round's.

Each flow belongs to a different user (USERS of them, written straight to the database): a
revocation ends that user's grant and every token of it, so flows of one user would refuse each
other's tokens. Rate limits are off (this measures capacity, not the limiter).

    python tools/soak.py [--minutes 5] [--backends sqlite,postgresql]

Exit status 1 when a check fails. Results go to soak-results.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_http import COMMON_LUA, REDIRECT, Deployment, ensure_wrk, run_wrk  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
USERS = 4000  # per wrk thread; at a few hundred flows/s a user comes round every ~10 s

MIX_LUA = COMMON_LUA + r"""
-- One flow per user: authorize, exchange, /me, refresh, /me, and for one flow in ten a revocation,
-- each step sent when the step before it has answered. The steps are tied together by X-Request-Id
-- (lbauth echoes it).
local queue, pause, users, turn, flows, next_flow = {}, 0, {}, 0, {}, 0
function init(args)
  pause = tonumber(args[1]) or 0
  for line in io.lines(args[2] .. "." .. id) do users[#users + 1] = line end
end
function delay() return pause end
local function form(path, body, rid)
  return wrk.format("POST", path, {["Content-Type"] = "application/x-www-form-urlencoded", ["X-Request-Id"] = rid},
    body)
end
local function me(flow, step)
  return wrk.format("GET", "/api/auth/me", {["Authorization"] = "Bearer " .. flows[flow].at,
    ["X-Request-Id"] = flow .. "-" .. step})
end
function request()
  local nxt = table.remove(queue, 1)
  if nxt then return nxt end
  turn = turn % #users + 1  -- a different user each flow: revoking one user's grant touches no other flow
  next_flow = next_flow + 1
  local flow = "t" .. id .. "f" .. next_flow
  flows[flow] = {}
  return wrk.format("POST", "/api/oauth/authorize/external", {["Content-Type"] = "application/json",
    ["Authorization"] = "Bearer " .. users[turn], ["X-Request-Id"] = flow .. "-az"}, authorize_body)
end
function response(status, headers, body)
  local rid = headers["X-Request-Id"] or ""
  local flow, step = rid:match("^(t%d+f%d+)%-(%a+%d?)$")
  if status ~= 200 or not flow or not flows[flow] then return end
  if step == "az" then
    local code = body:match('"code":"(lba_ac_[^"]+)"')
    table.insert(queue, form("/api/oauth/token/code", "grant_type=authorization_code&code=" .. code .. "&" .. tail,
      flow .. "-ex"))
  elseif step == "ex" then
    flows[flow].at, flows[flow].rt = body:match('"accessToken":"([^"]+)"'), body:match('"refreshToken":"([^"]+)"')
    table.insert(queue, me(flow, "me1"))
  elseif step == "me1" then
    table.insert(queue, form("/api/oauth/token/refresh",
      "grant_type=refresh_token&refresh_token=" .. flows[flow].rt .. "&" .. creds, flow .. "-rf"))
  elseif step == "rf" then
    flows[flow].at = body:match('"accessToken":"([^"]+)"')
    table.insert(queue, me(flow, "me2"))
  elseif step == "me2" then
    if tonumber(flow:match("f(%d+)$")) % 10 == 0 then  -- one flow in ten ends with a revocation
      table.insert(queue, form("/oauth/revoke", "token=" .. flows[flow].rt .. "&" .. creds, flow .. "-rv"))
    else
      flows[flow] = nil
    end
  elseif step == "rv" then
    flows[flow] = nil
  end
end
"""


async def seed_users(database_url: str, files: list[Path]) -> None:
    """USERS users with a live user token each, per file (one wrk thread reads one file)."""
    from sqlalchemy import insert

    from lbauth.core.crypto import opaque
    from lbauth.storage.db import open_database
    from lbauth.storage.models import sessions, users
    db = open_database(database_url)
    now = int(time.time())
    try:
        for n, path in enumerate(files):
            tokens = [opaque.new_secret(opaque.USER_TOKEN) for _ in range(USERS)]
            ids = [f"usr_soak{n}x{i}" for i in range(USERS)]
            user_rows = [dict(id=u, email=f"{u}@soak.example", name="Soak", avatar="", bio="", interest_tags=[],
                              password_hash="-", created_at=now) for u in ids]
            token_rows = [dict(id=opaque.new_id("ses_"), token_hash=opaque.digest(t), user_id=u, kind="api",
                               created_at=now, last_used_at=now, expires_at=now + 86400, user_agent="soak",
                               ip_address="127.0.0.1") for t, u in zip(tokens, ids, strict=True)]
            await db.transaction(lambda c, u=user_rows, t=token_rows: (c.execute(insert(users), u),
                                                                       c.execute(insert(sessions), t)))
            path.write_text("\n".join(tokens) + "\n")
    finally:
        await db.close()


def worker_rss_kib(supervisor_pid: int) -> int:
    """The resident memory of the supervisor's children (the workers), in KiB."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("PPid", "").strip() == str(supervisor_pid):
            total += int(fields.get("VmRSS", "0 kB").split()[0])
    return total


def soak(wrk: str, backend: str, minutes: int, pg_url: str) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"lbauth-soak-{backend}-") as tmp:
        deployment = Deployment(backend, 2, Path(tmp), pg_url)
        asyncio.run(deployment.create_database())
        try:
            seed = asyncio.run(deployment.seed(codes_per_thread=1))
            users_file = Path(tmp) / "users"
            asyncio.run(seed_users(deployment.database_url, [Path(f"{users_file}.{i}") for i in range(2)]))
            deployment.start()
            try:
                credentials = f"client_id={seed['client_id']}&client_secret={seed['client_secret']}"
                script = Path(tmp) / "mix.lua"
                head = "".join(f"{k} = {json.dumps(v)}\n" for k, v in {
                    "creds": credentials,
                    "tail": f"redirect_uri={REDIRECT}&{credentials}",
                    "authorize_body": json.dumps({"clientId": seed["client_id"], "redirectUri": REDIRECT,
                                                  "scope": ["userinfo"], "state": "soak"})}.items())
                script.write_text(head + MIX_LUA)
                connections = 32
                peak = run_wrk(wrk, deployment.url, 10, connections, str(script), ["0", str(users_file)])
                target = max(1, int(peak["rps"] * 0.8))
                pause_ms = max(1, round(connections * 1000 / target))
                samples: list[tuple[float, int]] = []
                stop = threading.Event()

                def sample() -> None:
                    while not stop.wait(5):
                        samples.append((time.monotonic(), worker_rss_kib(deployment.proc.pid)))
                sampler = threading.Thread(target=sample, daemon=True)
                sampler.start()
                rounds = []
                for minute in range(minutes):
                    rounds.append(run_wrk(wrk, deployment.url, 60, connections, str(script),
                                          [str(pause_ms), str(users_file)]))
                    if minute == 0:  # memory is compared from after the first (warm-up) round
                        samples[:] = [(time.monotonic(), worker_rss_kib(deployment.proc.pid))]
                    print(f"  {backend} minute {minute + 1}: {rounds[-1]['rps']} req/s, p99 {rounds[-1]['p99_ms']} ms, "
                          f"non-2xx {rounds[-1]['non2xx']}, socket errors {rounds[-1]['socket_errors']}", flush=True)
                stop.set()
                sampler.join()
                samples.append((time.monotonic(), worker_rss_kib(deployment.proc.pid)))
            finally:
                deployment.stop()
        finally:
            asyncio.run(deployment.drop_database())
    rss_first, rss_last = samples[0][1], samples[-1][1]
    errors = sum(r["non2xx"] + r["socket_errors"] for r in rounds)
    result = {"peak_rps": peak["rps"], "target_rps": target, "pause_ms": pause_ms, "rounds": rounds,
              "errors": errors, "rss_kib_first": rss_first, "rss_kib_last": rss_last,
              "rss_growth": round(rss_last / rss_first - 1, 4),
              "p99_first_ms": rounds[0]["p99_ms"], "p99_last_ms": rounds[-1]["p99_ms"]}
    result["ok"] = {"zero errors": errors == 0, "memory growth < 10%": result["rss_growth"] < 0.10,
                    "p99 stable (last <= 1.5x first)": rounds[-1]["p99_ms"] <= 1.5 * max(rounds[0]["p99_ms"], 1)}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=int, default=5)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--pg-url", default=os.environ.get("LBAUTH_TEST_POSTGRES_URL",
                                                           "postgresql+asyncpg://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--out", default=str(ROOT / "soak-results.json"))
    args = parser.parse_args(argv)
    wrk = ensure_wrk()
    results = {}
    for backend in args.backends.split(","):
        print(f"soak, {backend}: finding the mix's peak, then {args.minutes} minutes at 80 %", flush=True)
        results[backend] = soak(wrk, backend, args.minutes, args.pg_url)
        r = results[backend]
        print(f"{backend}: peak {r['peak_rps']} req/s, target {r['target_rps']}; errors {r['errors']}; "
              f"workers' memory {r['rss_kib_first']} -> {r['rss_kib_last']} KiB ({r['rss_growth']:+.1%}); "
              f"p99 {r['p99_first_ms']} -> {r['p99_last_ms']} ms")
        for check, passed in r["ok"].items():
            print(f"  {'ok ' if passed else 'FAIL'} {check}")
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return 0 if all(all(r["ok"].values()) for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
