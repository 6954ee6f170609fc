"""DPoP, pushed requests and the device grant in `make bench` (RFC 9449, RFC 9126, RFC 8628): the
code exchange at /oauth/token with a DPoP proof beside the same exchange without one, alternated on
one deployment (goal: the bound exchange at >= 0.8x the plain one's throughput); the PAR push; and
the device's poll at /oauth/token, of an approved device code (its tokens, 200) and of a pending one
(`authorization_pending`, a 400 by RFC 8628 3.5: counted apart, not as a failure).

A proof is single use and must be made within 60 s of the request: each run's proofs are made
just before it, one per code, and wrk sends them in order (`code proof` lines, one file per thread).

    python tools/bench_dpop.py [--backends sqlite,postgresql] [--seconds 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jwt

TOOLS = Path(__file__).resolve().parent
sys.path[:0] = [str(TOOLS), str(TOOLS.parent)]

import bench_http  # noqa: E402
from bench_http import COMMON_LUA, REDIRECT, Deployment, ensure_wrk, run_wrk  # noqa: E402
from sqlalchemy import insert, select  # noqa: E402

from lbauth.clock import SystemClock  # noqa: E402
from lbauth.core.clients import apps  # noqa: E402
from lbauth.core.crypto import opaque  # noqa: E402
from lbauth.core.crypto.keys import generate_private_key, public_jwk  # noqa: E402
from lbauth.core.crypto.masterkey import load_master_keys  # noqa: E402
from lbauth.core.oauth.server import GRANT_TYPE_NAMES  # noqa: E402
from lbauth.settings import load as load_settings  # noqa: E402
from lbauth.storage.db import open_database  # noqa: E402
from lbauth.storage.models import device_codes, grants, subjects  # noqa: E402

MAX_RPS = 6000  # exchanges/s a run's codes and proofs must cover, per run

# Each request: the next `code proof` line of this thread's file, at /oauth/token with HTTP Basic;
# with `dpop` set, the proof in a DPoP header.
# Each wrk thread reads its own file of lines (`<path>.<thread id>`) and takes the next one per
# request (the last again once they run out).
LINES_LUA = COMMON_LUA + r"""
local lines, i = {}, 0
function init(args)
  for line in io.lines(args[1] .. "." .. id) do lines[#lines + 1] = line end
end
function next_line()
  i = i + 1
  return lines[i] or lines[#lines]
end
"""

TOKEN_LUA = LINES_LUA + r"""
function request()
  local code, proof = next_line():match("^(%S+) (%S+)$")
  local headers = {["Content-Type"] = "application/x-www-form-urlencoded", ["Authorization"] = basic}
  if dpop then headers["DPoP"] = proof end
  return wrk.format("POST", "/oauth/token", headers,
    "grant_type=authorization_code&code=" .. code .. "&redirect_uri=" .. redirect_uri)
end
"""

# Each request: the next device code of this thread's file, polled once.
DEVICE_LUA = LINES_LUA + r"""
function request()
  return wrk.format("POST", "/oauth/token", {["Content-Type"] = "application/x-www-form-urlencoded",
    ["Authorization"] = basic},
    "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Adevice_code&device_code=" .. next_line())
end
"""

PAR_LUA = r"""
function request()
  return wrk.format("POST", "/oauth/par", {["Content-Type"] = "application/x-www-form-urlencoded",
    ["Authorization"] = basic}, body)
end
"""


def proofs(count: int, url: str) -> list[str]:
    """`count` fresh ES256 proofs of one key for POST `url` (RFC 9449 4.2)."""
    key = generate_private_key("ES256")
    jwk = {k: v for k, v in public_jwk("ES256", key.public_key()).items() if k in ("kty", "crv", "x", "y")}
    now = int(time.time())
    return [jwt.encode({"jti": secrets.token_urlsafe(12), "htm": "POST", "htu": url, "iat": now}, key,
                       algorithm="ES256", headers={"typ": "dpop+jwt", "jwk": jwk}) for _ in range(count)]


async def seed_device_codes(deployment: Deployment, seed: dict, per_thread: int) -> dict[str, list[list[str]]]:
    """The seeded app registered for the device grant, and device codes for it written straight to
    the database (one list per wrk thread): `approved` ones under the user's grant, `pending` ones
    the user has not answered yet."""
    settings = load_settings({"database_url": deployment.database_url, "data_dir": str(deployment.data_dir)},
                             environ={})
    db = open_database(deployment.database_url)
    try:
        policy = apps.AppPolicy(development=True, grant_types=GRANT_TYPE_NAMES)
        operator = apps.Apps(db, SystemClock(), lambda: load_master_keys(settings), policy)
        await operator.update(seed["client_id"], device=True)
        user_id, grant_id, asu = await db.read(lambda c: c.execute(
            select(grants.c.user_id, grants.c.id, subjects.c.asu)
            .join(subjects, (subjects.c.user_id == grants.c.user_id) & (subjects.c.app_id == grants.c.app_id))
            .where(grants.c.app_id == seed["app_id"])).one())
        now, found = int(time.time()), {}
        for kind in ("approved", "pending"):
            found[kind] = []
            for _thread in range(2):
                plain = [opaque.new_secret(opaque.DEVICE_CODE) for _ in range(per_thread)]
                answered = ({"user_id": user_id, "grant_id": grant_id, "asu": asu, "approved_at": now,
                             "auth_time": now, "amr": "pwd"} if kind == "approved" else {})
                rows = [dict(device_code_hash=opaque.digest(code), user_code_hash=secrets.token_hex(32),
                             app_id=seed["app_id"], scopes=["userinfo"], resources=[], created_at=now,
                             expires_at=now + 600, interval=5, **answered) for code in plain]
                for start in range(0, len(rows), 5000):
                    chunk = rows[start:start + 5000]
                    await db.transaction(lambda c, chunk=chunk: c.execute(insert(device_codes), chunk))
                found[kind].append(plain)
        return found
    finally:
        await db.close()


def run(backend: str, seconds: int, rounds: int, pg_url: str, workers: int = 2) -> dict:
    wrk = ensure_wrk()
    per_run = seconds * MAX_RPS // 2 + 1000  # per wrk thread
    with tempfile.TemporaryDirectory(prefix="lbauth-bench-dpop-") as tmp:
        directory = Path(tmp)
        deployment = Deployment(backend, workers, directory, pg_url)
        asyncio.run(deployment.create_database())
        try:
            seed = asyncio.run(deployment.seed(codes_per_thread=2 * rounds * per_run, openid_codes=False))
            deployment.start()
            try:
                basic = "Basic " + bench_http.base64.b64encode(
                    f"{seed['client_id']}:{seed['client_secret']}".encode()).decode()
                script = directory / "token.lua"
                results: dict[str, list[dict]] = {"plain": [], "dpop": []}
                for index, kind in enumerate(["plain", "dpop"] * rounds):
                    script.write_text(f"basic = {json.dumps(basic)}\nredirect_uri = {json.dumps(REDIRECT)}\n"
                                      f"dpop = {'true' if kind == 'dpop' else 'false'}\n" + TOKEN_LUA)
                    lines_file = directory / f"lines-{index}"
                    for thread, codes in enumerate(seed["codes"]):
                        mine = codes[index * per_run:(index + 1) * per_run]
                        made = (proofs(len(mine), deployment.url + "/oauth/token") if kind == "dpop"
                                else ["-"] * len(mine))
                        Path(f"{lines_file}.{thread}").write_text(
                            "\n".join(f"{c} {p}" for c, p in zip(mine, made, strict=True)) + "\n")
                    results[kind].append(run_wrk(wrk, deployment.url, seconds, 32, str(script), [str(lines_file)]))
                par_script = directory / "par.lua"
                body = bench_http.urlencode({"response_type": "code", "redirect_uri": REDIRECT, "scope": "userinfo",
                                             "state": "bench"})
                par_script.write_text(f"basic = {json.dumps(basic)}\nbody = {json.dumps(body)}\n" + PAR_LUA)
                par = run_wrk(wrk, deployment.url, seconds, 32, str(par_script))
                device = asyncio.run(seed_device_codes(deployment, seed, per_run))
                device_script = directory / "device.lua"
                device_script.write_text(f"basic = {json.dumps(basic)}\nredirect_uri = {json.dumps(REDIRECT)}\n"
                                         + DEVICE_LUA)
                polls = {}
                for kind, codes_by_thread in device.items():
                    for thread, codes in enumerate(codes_by_thread):
                        Path(f"{directory}/device-{kind}.{thread}").write_text("\n".join(codes) + "\n")
                    polls[kind] = run_wrk(wrk, deployment.url, seconds, 32, str(device_script),
                                          [f"{directory}/device-{kind}"])
            finally:
                deployment.stop()
        finally:
            asyncio.run(deployment.drop_database())
    plain = statistics.median(r["rps"] for r in results["plain"])
    dpop = statistics.median(r["rps"] for r in results["dpop"])
    return {"plain_exchange_rps": round(plain), "dpop_exchange_rps": round(dpop),
            "dpop_exchange_ratio": round(dpop / max(plain, 1), 3), "par_push_rps": par["rps"],
            "device_poll_approved_rps": polls["approved"]["rps"],
            # every pending poll is answered 400 authorization_pending: its rate is the non-2xx rate
            "device_poll_pending_rps": polls["pending"]["total_rps"],
            "non2xx": sum(r["non2xx"] for runs in results.values() for r in runs) + par["non2xx"]
            + polls["approved"]["non2xx"],
            "runs": {**results, "device": polls}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pg-url", default="postgresql+asyncpg://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    found = {backend: run(backend, args.seconds, args.rounds, args.pg_url) for backend in args.backends.split(",")}
    for backend, figures in found.items():
        print(backend, {k: v for k, v in figures.items() if k != "runs"})
    return 0 if all(f["non2xx"] == 0 for f in found.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
