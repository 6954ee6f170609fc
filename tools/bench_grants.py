"""The many-grants scenario of `make bench` (tools/bench_http.py): the code exchange, authorize and
refresh with 1,000 users and 1,000 apps, user i holding a grant on app i, and no two requests in
flight on the same grant. Beside the one-grant runs, where every request shares one grant row (and
its user and app rows), it tells the cost of a request apart from the contention on one row.

A wrk thread keeps its grants in a first-come queue: a request takes the grant at its head, its
answer puts that grant back at the tail (found by the `client_id` of the access token, or the
`state` echoed by authorize). A request that finds the queue empty (every grant in flight) takes
one anyway and is counted as `shared_grant_requests`, which should stay 0.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from urllib.parse import urlencode

from sqlalchemy import insert

from lbauth.clock import SystemClock
from lbauth.core.accounts import users
from lbauth.core.accounts.sessions import API
from lbauth.core.clients import apps
from lbauth.core.crypto import opaque
from lbauth.core.crypto.masterkey import load_master_keys
from lbauth.settings import load as load_settings
from lbauth.storage.db import open_database
from lbauth.storage.models import authorization_codes, grants, refresh_tokens, sessions, subjects
from lbauth.storage.models import users as users_table

# Each run's name: the one-grant run's name with this suffix (bench-results.json, the table).
SUFFIX = "_many_grants"
ENDPOINTS = ("code_exchange", "authorize", "refresh")
REDIRECT = "https://bench.example/cb"

# wrk (LuaJIT). Each thread reads its grants from `args[1].<thread id>`, one a line, tab-separated:
# the key its answers are recognised by, the Authorization header ("-": none), then the bodies it
# sends in turn (one per code for the exchange, one for the others).
MANY_LUA = r"""
local threads, counter = {}, 0
function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

local B64 = {}
local ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
for i = 1, 64 do B64[ALPHABET:byte(i)] = i - 1 end
local function unbase64url(s)
  local out = {}
  for i = 1, #s, 4 do
    local a, b, c, d = s:byte(i, i + 3)
    local n = B64[a] * 262144 + (B64[b] or 0) * 4096 + (B64[c] or 0) * 64 + (B64[d] or 0)
    out[#out + 1] = string.char(math.floor(n / 65536), math.floor(n / 256) % 256, n % 256)
  end
  return table.concat(out)
end

local by_key, all, queue, head, tail, shared, unknown = {}, {}, {}, 1, 0, 0, 0
function init(args)
  for line in io.lines(args[1] .. "." .. id) do
    local fields = {}
    for field in line:gmatch("[^\t]+") do fields[#fields + 1] = field end
    local grant = {auth = fields[2], bodies = {}, sent = 0}
    for k = 3, #fields do grant.bodies[#grant.bodies + 1] = fields[k] end
    by_key[fields[1]] = grant
    all[#all + 1] = grant
    tail = tail + 1
    queue[tail] = grant
  end
end

function request()
  local grant
  if head <= tail then
    grant = queue[head]
    queue[head] = nil
    head = head + 1
  elseif #all > 0 then  -- every grant in flight (or lost to an unrecognised answer): share one
    shared = shared + 1
    wrk.thread:set("shared", shared)
    grant = all[math.random(#all)]
  else  -- wrk checks the script in its main Lua state, before any init()
    return wrk.format(method, path, {["Content-Type"] = content_type}, "")
  end
  grant.sent = grant.sent + 1
  local headers = {["Content-Type"] = content_type}
  if grant.auth ~= "-" then headers["Authorization"] = grant.auth end
  return wrk.format(method, path, headers, grant.bodies[(grant.sent - 1) % #grant.bodies + 1])
end

function response(status, headers, body)
  local key = body:match('"state":"([^"]+)"')
  if not key then
    local payload = body:match('"accessToken":"[^.]+%.([^.]+)%.')
    if payload then key = unbase64url(payload):match('"client_id":"([^"]+)"') end
  end
  local grant = key and by_key[key]
  if grant then
    tail = tail + 1
    queue[tail] = grant
  else
    unknown = unknown + 1
    wrk.thread:set("unknown", unknown)
  end
end

function done(summary, latency, requests)
  local total_shared, total_unknown = 0, 0
  for _, t in ipairs(threads) do
    total_shared = total_shared + (t:get("shared") or 0)
    total_unknown = total_unknown + (t:get("unknown") or 0)
  end
  io.write("SHARED " .. total_shared .. "\nUNKNOWN " .. total_unknown .. "\n")
end
"""


async def seed(database_url: str, data_dir: Path, count: int, codes_each: int) -> list[dict]:
    """`count` users, each signed in once, and `count` apps, user i holding a live grant on app i
    with `codes_each` codes and one refresh token. The apps are registered as an operator does;
    the other rows are written straight to the database (an argon2 sign-in per user would take
    minutes)."""
    settings = load_settings({"database_url": database_url, "data_dir": str(data_dir)}, environ={})
    clock = SystemClock()
    now = int(time.time())
    db = open_database(database_url)
    try:
        owner = f"bench-owner-{time.time_ns()}@example.com"
        await users.create_user(db, clock, email=owner, name="Bench owner", password="harbour-lights")
        keys = load_master_keys(settings)
        registry = apps.Apps(db, clock, lambda: keys, apps.AppPolicy(development=True))
        registered: list[apps.CreatedApp] = []
        for start in range(0, count, 50):  # a few at a time: PostgreSQL's round trips overlap
            registered += await asyncio.gather(*(
                registry.create(name=f"Bench {i}", owner_email=owner, redirect_uris=[REDIRECT])
                for i in range(start, min(start + 50, count))))
        app_ids = {app.client_id: app.app_id for app in registered}
        slots, rows = [], {table: [] for table in ("users", "sessions", "grants", "subjects", "codes", "tokens")}
        for i, app in enumerate(registered):
            user_id, grant_id, asu = f"usr_many{i}", f"gnt_many{i}", f"asu_many{i}"
            app_id = app_ids[app.client_id]
            user_token, refresh_token = opaque.new_secret(opaque.USER_TOKEN), opaque.new_secret(opaque.REFRESH_TOKEN)
            codes = [opaque.new_secret(opaque.CODE) for _ in range(codes_each)]
            rows["users"].append(dict(id=user_id, email=f"many{i}@bench.example", name="M", avatar="", bio="",
                                      interest_tags=[], password_hash="-", created_at=now))
            rows["sessions"].append(dict(id=f"ses_many{i}", token_hash=opaque.digest(user_token), user_id=user_id,
                                         kind=API, created_at=now, expires_at=now + 86400, authenticated_at=now))
            rows["grants"].append(dict(id=grant_id, app_id=app_id, user_id=user_id, scopes=["userinfo"],
                                       created_at=now, updated_at=now))
            rows["subjects"].append(dict(app_id=app_id, user_id=user_id, asu=asu, created_at=now))
            rows["codes"] += [dict(code_hash=opaque.digest(code), app_id=app_id, user_id=user_id, grant_id=grant_id,
                                   asu=asu, redirect_uri=REDIRECT, scopes=["userinfo"], code_challenge=None,
                                   created_at=now, expires_at=now + 3600) for code in codes]
            rows["tokens"].append(dict(token_hash=opaque.digest(refresh_token), app_id=app_id, user_id=user_id,
                                       grant_id=grant_id, code_hash=None, asu=asu, scopes=["userinfo"],
                                       created_at=now, expires_at=now + 86400))
            slots.append({"clientId": app.client_id, "clientSecret": app.client_secret, "user_token": user_token,
                          "refresh_token": refresh_token, "codes": codes})
        for table, name in ((users_table, "users"), (grants, "grants"), (subjects, "subjects"),
                            (authorization_codes, "codes"), (refresh_tokens, "tokens"), (sessions, "sessions")):
            if name == "sessions":  # used now: no request of the runs that follow writes its last use
                used = int(time.time())
                rows[name] = [{**row, "last_used_at": used} for row in rows[name]]
            for start in range(0, len(rows[name]), 5000):
                chunk = rows[name][start:start + 5000]
                await db.transaction(lambda c, table=table, chunk=chunk: c.execute(insert(table), chunk))
        return slots
    finally:
        await db.close()


def write_grants(path: Path, endpoint: str, slots: list[dict]) -> None:
    """The wrk threads' files (`path.0`, `path.1`: every other grant) for one endpoint."""
    lines = []
    for slot in slots:
        client = {"client_id": slot["clientId"], "client_secret": slot["clientSecret"]}
        if endpoint == "code_exchange":
            auth, bodies = "-", [urlencode({"grant_type": "authorization_code", "code": code,
                                            "redirect_uri": REDIRECT, **client}) for code in slot["codes"]]
        elif endpoint == "refresh":
            auth, bodies = "-", [urlencode({"grant_type": "refresh_token", "refresh_token": slot["refresh_token"],
                                            **client})]
        else:
            auth = f"Bearer {slot['user_token']}"
            bodies = [json.dumps({"clientId": slot["clientId"], "redirectUri": REDIRECT, "scope": ["userinfo"],
                                  "state": slot["clientId"]})]
        lines.append("\t".join([slot["clientId"], auth, *bodies]))
    for thread in range(2):  # wrk -t2
        Path(f"{path}.{thread}").write_text("\n".join(lines[thread::2]) + "\n")


ROUTES = {"code_exchange": ("/api/oauth/token/code", "application/x-www-form-urlencoded"),
          "authorize": ("/api/oauth/authorize/external", "application/json"),
          "refresh": ("/api/oauth/token/refresh", "application/x-www-form-urlencoded")}
