#!/usr/bin/env python3
"""`make bench`: lbauth's benchmarks; writes bench-results.json and prints a table.

In-process verification (contract section 14), one key, one core, best of several runs:
- verify_ops        lbauth.verify.Verifier.verify (signature, claims, check-list, no I/O)
- pyjwt_decode_ops  jwt.decode with a prebuilt key object and the same required claims
- raw_verify_ops    the bare cryptography signature check of the same token
- verify_100k_ratio Verifier.verify with 100,000 check-list entries, over an empty list
- verify_dpop_ratio Verifier.verify of a DPoP-bound token with a fresh proof, over a plain verify

    python tools/bench.py [--quick] [--only verify] [--out bench-results.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.utils import base64url_decode, base64url_encode, raw_to_der_signature

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tools/bench_http.py beside this file

from bench_grants import ENDPOINTS as MANY_ENDPOINTS  # noqa: E402
from bench_grants import SUFFIX as MANY  # noqa: E402

from lbauth.core.crypto.keys import SIGNING_ALGS, Signer, generate_private_key, public_jwk  # noqa: E402
from lbauth.verify import REQUIRED_CLAIMS, CheckList, DPoPRequest, Entry, Verifier, jwk_thumbprint  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ISSUER = AUDIENCE = "https://auth.bench.example"


def rate(fn: Callable[[], object], seconds: float, runs: int) -> float:
    """Operations per second of `fn`: the best of `runs` timed runs of about `seconds` each."""
    best = 0.0
    for _ in range(runs):
        n, started = 0, time.perf_counter()
        deadline = started + seconds
        while True:
            for _ in range(200):
                fn()
            n += 200
            now = time.perf_counter()
            if now >= deadline:
                break
        best = max(best, n / (now - started))
    return best


def bench_signing(seconds: float, runs: int, now: int) -> dict:
    """Signer.sign ops/s of an ID token (contract 15 claims) with each algorithm an app may pick:
    what an OpenID code exchange adds to a plain one."""
    claims = {"iss": ISSUER, "aud": "cid_bench", "sub": "asu_" + "x" * 32, "iat": now, "exp": now + 3600,
              "auth_time": now, "nonce": "n" * 22, "at_hash": "h" * 22, "sid": "ses_" + "s" * 26, "amr": ["pwd"]}
    found = {}
    for alg in SIGNING_ALGS:
        signer = Signer("kid-bench", alg, generate_private_key(alg))
        found[f"sign_{alg}_ops"] = round(rate(lambda signer=signer: signer.sign(claims, "JWT"), seconds, runs))
    return found


def bench_verify_dpop(verifier: Verifier, key: object, kid: str, claims: dict, quick: bool) -> dict:
    """Verifier.verify of a DPoP-bound token with its proof (RFC 9449 7: two signature checks, the
    proof's and the token's) beside a plain verify of the same token unbound, alternated; each proof
    is new (its `jti` is used once), made before the timing starts."""
    client_key = generate_private_key("ES256")
    jwk = {name: value for name, value in public_jwk("ES256", client_key.public_key()).items()
           if name in ("kty", "crv", "x", "y")}
    bound = "lba_at_" + jwt.encode({**claims, "cnf": {"jkt": jwk_thumbprint(jwk)}}, key, algorithm="ES256",
                                   headers={"kid": kid, "typ": "at+jwt"})
    plain = "lba_at_" + jwt.encode(claims, key, algorithm="ES256", headers={"kid": kid, "typ": "at+jwt"})
    url = AUDIENCE + "/notes"
    ath = base64url_encode(hashlib.sha256(bound.encode()).digest()).decode()
    batch, rounds = (500, 3) if quick else (2000, 5)
    dpop_rates, plain_rates = [], []
    for round_ in range(rounds):
        proofs = [jwt.encode({"jti": f"{round_}-{i}", "htm": "GET", "htu": url, "iat": int(time.time()),
                              "ath": ath}, client_key, algorithm="ES256", headers={"typ": "dpop+jwt", "jwk": jwk})
                  for i in range(batch)]
        started = time.perf_counter()
        for proof in proofs:
            verifier.verify(bound, dpop=DPoPRequest("GET", url, proof))
        dpop_rates.append(batch / (time.perf_counter() - started))
        started = time.perf_counter()
        for _ in range(batch):
            verifier.verify(plain)
        plain_rates.append(batch / (time.perf_counter() - started))
    return {"verify_dpop_ops": round(statistics.median(dpop_rates)),
            "verify_dpop_ratio": round(statistics.median(dpop_rates) / statistics.median(plain_rates), 3)}


def bench_verify(quick: bool) -> dict:
    seconds, runs = (0.5, 3) if quick else (1.5, 5)
    private = generate_private_key("ES256")
    public = private.public_key()
    kid = public_jwk("ES256", public)["kid"]
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "usr_bench", "client_id": "cid_bench", "scope": "userinfo",
              "iat": now, "exp": now + 7200, "jti": "jti-bench", "gid": "gnt_bench", "asu": "asu_bench"}
    jws = jwt.encode(claims, private, algorithm="ES256", headers={"kid": kid, "typ": "at+jwt"})
    token = "lba_at_" + jws

    verifier = Verifier(ISSUER, AUDIENCE)
    verifier.keys = {kid: ("ES256", public)}
    assert verifier.verify(token)["sub"] == "usr_bench"

    def pyjwt_decode() -> None:
        jwt.decode(jws, public, algorithms=["ES256"], audience=AUDIENCE, issuer=ISSUER,
                   options={"require": list(REQUIRED_CLAIMS)})

    signing_input, _, signature = jws.rpartition(".")
    der = raw_to_der_signature(base64url_decode(signature), public.curve)
    message = signing_input.encode()
    algorithm = ec.ECDSA(hashes.SHA256())

    def raw_verify() -> None:
        public.verify(der, message, algorithm)

    verify_ops = rate(lambda: verifier.verify(token), seconds, runs)
    pyjwt_ops = rate(pyjwt_decode, seconds, runs)
    raw_ops = rate(raw_verify, seconds, runs)

    full = Verifier(ISSUER, AUDIENCE)
    full.keys = verifier.keys
    full.checklist = CheckList()
    full.checklist.add(Entry(i, f"gnt_{i}", f"jti_{i}", now, now + 7200) for i in range(50_000))
    assert len(full.checklist) == 100_000
    # Interleave the two so that machine noise hits both alike; compare medians.
    empty_runs, full_runs = [], []
    for _ in range(runs * 2):
        empty_runs.append(rate(lambda: verifier.verify(token), seconds / 2, 1))
        full_runs.append(rate(lambda: full.verify(token), seconds / 2, 1))
    return {
        **bench_signing(seconds, runs, now),
        **bench_verify_dpop(verifier, private, kid, claims, quick),
        "verify_ops": round(verify_ops),
        "pyjwt_decode_ops": round(pyjwt_ops),
        "raw_verify_ops": round(raw_ops),
        "verify_vs_pyjwt": round(verify_ops / pyjwt_ops, 3),
        "verify_100k_checklist_ops": round(statistics.median(full_runs)),
        "verify_100k_ratio": round(statistics.median(full_runs) / statistics.median(empty_runs), 3),
    }


def http_table(results: dict) -> str:
    if "runs" not in results:
        return ""
    lines = [f"HTTP, {results['workers']} worker(s), {results['load_generator']}, {results['run_seconds']} s runs",
             f"ceiling (bare Tornado, small JSON): {results['ceiling_rps']} req/s", "",
             "| endpoint | backend | 2xx req/s | x ceiling | p50 ms | p99 ms | non-2xx | SQL statements |",
             "|---|---|---|---|---|---|---|---|"]
    for name in ("authorize", "authorize" + MANY, "code_exchange", "code_exchange" + MANY, "openid_code_exchange",
                 "openid_code_exchange_es256", "refresh", "refresh" + MANY, "public_refresh", "me", "full_flow"):
        for backend, runs in results["runs"].items():
            if name not in runs:
                continue
            run = runs[name]
            rps = run["flows_per_s"] if name == "full_flow" else run["rps"]
            unit = " flows/s" if name == "full_flow" else ""
            stmts = results["statements_by_backend"].get(backend, {}).get(name.removesuffix(MANY), "")
            lines.append(f"| {name} | {backend} | {rps}{unit} | {rps / results['ceiling_rps']:.2f} | {run['p50_ms']} | "
                         f"{run['p99_ms']} | {run['non2xx']} | {stmts} |")
    for name, alg in (("openid_code_exchange", "RS256, the default"), ("openid_code_exchange_es256", "ES256")):
        ratios = {b: runs[name]["rps"] / max(runs["code_exchange"]["rps"], 1)
                  for b, runs in results["runs"].items() if name in runs}
        if ratios:
            lines.append("")
            lines.append(f"OpenID exchange (an ID token signed with {alg}, beside the access token) / plain exchange: "
                         + ", ".join(f"{b} x{ratio:.2f}" for b, ratio in ratios.items()))
    many = [(name, backend, runs[name + MANY]["rps"] / max(runs[name]["rps"], 1), runs[name + MANY])
            for name in MANY_ENDPOINTS for backend, runs in results["runs"].items() if name + MANY in runs]
    if many:
        lines.append("")
        lines.append(f"{results.get('grants', 1000):,} users and apps, no two requests in flight on one grant "
                     f"(`{MANY}`) / one grant shared by every request: " + ", ".join(
                         f"{name} {backend} x{ratio:.2f}" for name, backend, ratio, _ in many))
        shared = sum(run.get("shared_grant_requests", 0) for *_, run in many)
        if shared:
            lines.append(f"(requests that found every grant in flight and shared one: {shared})")
    ratios = {b: runs["public_refresh"]["rps"] / max(runs["refresh"]["rps"], 1)
              for b, runs in results["runs"].items() if "public_refresh" in runs}
    if ratios:
        lines.append("")
        lines.append("Public client's refresh (POST /oauth/token, the token rotated: a new row, the old one retired) / "
                     "confidential refresh (not rotated): " + ", ".join(f"{b} x{r:.2f}" for b, r in ratios.items()))
    if "scaling" in results:
        sc = results["scaling"]
        lines.append("")
        for name, path in (("refresh", "/api/oauth/token/refresh"), ("me", "/api/auth/me")):
            lines.append(f"1 -> {results['workers']} workers, {path} on SQLite: {sc[name]['rps_1_worker']} -> "
                         f"{sc[name]['rps_' + str(results['workers']) + '_workers']} req/s (x{sc[name]['speedup']})")
    if "dpop" in results:
        lines.append("")
        for backend, d in results["dpop"].items():
            lines.append(f"DPoP (tools/bench_dpop.py), {backend}: the bound code exchange "
                         f"{d['dpop_exchange_rps']} req/s beside the plain one's {d['plain_exchange_rps']} "
                         f"(x{d['dpop_exchange_ratio']}, goal >= 0.8); the PAR push {d['par_push_rps']} req/s; "
                         f"non-2xx {d['non2xx']}")
    if "tracing" in results:
        lines.append("")
        for backend, t in results["tracing"].items():
            lines.append(f"Tracing (tools/bench_tracing.py), {backend}, the code exchange: off {t['off_rps']} req/s, "
                         f"{t['off_cpu_us_per_request']} us CPU per request; spans made, not exported "
                         f"{t['spans_rps']} req/s (x{t['spans_rps_ratio']}, +{t['spans_cpu_us_added']} us); "
                         f"exported over OTLP/HTTP {t['otlp_rps']} req/s (x{t['otlp_rps_ratio']}, "
                         f"+{t['otlp_cpu_us_added']} us); non-2xx {t['non2xx']}")
    if "prototype" in results:
        pr = results["prototype"]
        lines.append("")
        lines.append(f"PostgreSQL code exchange beside a raw-asyncpg prototype doing the same work in one statement "
                     f"(tools/bench_prototype.py; median of {pr['rounds']} alternated runs):")
        for workers in (1, 2):
            ours, theirs = pr[f"lbauth_{workers}w"], pr[f"prototype_{workers}w"]
            lines.append(f"- {workers} worker(s): lbauth {ours['rps']} req/s, {ours['cpu_us_per_request']} us CPU per "
                         f"request; prototype {theirs['rps']} req/s, {theirs['cpu_us_per_request']} us: throughput "
                         f"x{pr[f'throughput_ratio_{workers}w']}, CPU x{pr[f'cpu_ratio_{workers}w']}; non-2xx "
                         f"{ours['non2xx'] + theirs['non2xx']}")
    if "postgresql_scaling" in results:
        sc = results["postgresql_scaling"]
        for name, label in (("authorize", "/api/oauth/authorize/external"), ("refresh", "/api/oauth/token/refresh"),
                            ("prototype_authorize", "the prototype's authorize")):
            if name in sc:  # the prototype's authorize: bench-results.json files from 2026-11-28 on
                one, two = sc[name], "postgres_cpu_us_per_request_2_workers"
                cpu = (f"; CPU per request, server {one['cpu_us_per_request_1_worker']} -> "
                       f"{one['cpu_us_per_request_2_workers']} us, PostgreSQL "
                       f"{one['postgres_cpu_us_per_request_1_worker']} -> {one[two]} us" if two in one else "")
                lines.append(f"1 -> 2 workers, {label} on PostgreSQL: {one['rps_1_worker']} -> "
                             f"{one['rps_2_workers']} req/s (x{one['speedup']}, median of {sc['rounds']}{cpu})")
    for backend, g in results.get("growth", {}).items():
        lines.append("")
        lines.append(f"growth, {backend}: refresh p50 {g['empty']['p50_ms']} ms on an empty database, "
                     f"{g['filled']['p50_ms']} ms with {g['rows']['refresh_tokens']:,} refresh tokens and "
                     f"{g['rows']['grants']:,} grants (x{g['p50_ratio']}; `python tools/bench.py --growth`)")
    lines.append("")
    lines.append("webhook deliveries to a loopback receiver: " + ", ".join(
        f"{b} {n}/s" for b, n in results.get("webhook_deliveries_per_s", {}).items()))
    return "\n".join(lines)


def table(results: dict) -> str:
    rows = [*((f"sign_{alg}_ops", f"Signer.sign, an ID token, {alg}, ops/s") for alg in SIGNING_ALGS),
            ("verify_ops", "Verifier.verify, ops/s"), ("pyjwt_decode_ops", "jwt.decode, same key and claims"),
            ("raw_verify_ops", "cryptography verify only"), ("verify_vs_pyjwt", "Verifier.verify / jwt.decode"),
            ("verify_100k_checklist_ops", "Verifier.verify, 100,000 check-list entries"),
            ("verify_100k_ratio", "100,000 entries / empty list"),
            ("verify_dpop_ops", "Verifier.verify, DPoP-bound token with its proof"),
            ("verify_dpop_ratio", "DPoP verify / plain verify (goal >= 0.45)")]
    width = max(len(label) for _, label in rows)
    return "\n".join(f"{label.ljust(width)}  {results[key]:>10}" for key, label in rows if key in results)


HISTORY_MARKER = "<!-- before-and-after: kept by tools/bench.py when it rewrites this file -->"


def write_docs(path: Path, results: dict, report: str) -> None:
    """docs/performance.md: the latest figures, the machine, and how to reproduce them; the
    before-and-after records of past changes (below HISTORY_MARKER) are kept."""
    history = ""
    if path.exists() and HISTORY_MARKER in path.read_text():
        history = path.read_text().split(HISTORY_MARKER, 1)[1].strip("\n")
    machine = results["machine"]
    text = f"""# Performance

The latest `make bench` run (written by `tools/bench.py`; the raw figures are in `bench-results.json`).

- Machine: {machine['cpus']} CPUs, {machine['platform']}, Python {machine['python']}; run at {machine['at']}
  {'(quick mode)' if machine['quick'] else ''}
- Load generator: {results.get('load_generator', '-')}; server and generator share the machine.
- Every figure counts only 2xx answers; the non-2xx count of each run is beside it.

## Signing and verification (in-process, one core; verification ES256)

```
{table(results)}
```

## HTTP

{http_table(results)}

## Where the time goes (py-spy on one worker under wrk)

What the hot paths do now, and what changed the figures:

- **SQLite units of work run on the event loop's thread**, on one connection per process that never
  waits (busy timeout 0). A unit of work is a few statements on a local file, tens of microseconds;
  the thread hop it replaced cost 90-130 us and made the GIL hand-offs the bottleneck. A write that
  finds another process holding the write lock yields to the loop and tries again; WAL checkpoints
  run on a worker thread every second. (An app read fell from 474 to 114 us of CPU.)
- **Statements skip SQLAlchemy's execution layer** (`lbauth/storage/db/plans.py`): SQLAlchemy
  compiles each statement once; the SQL goes straight to the driver with SQLAlchemy's own bind and
  result processors. On SQLite a code exchange's unit of work fell from about 130 to 60 us of CPU
  and an app read from 42 to 11 us (the bare driver: 57 and 8 us); the execution layer (execution
  context, events, cursor result) had cost more than SQLite itself. On PostgreSQL a whole unit of
  work runs in one greenlet and sends prepared asyncpg statements: a one-statement unit fell from
  480 to 155 us of CPU (a bare asyncpg `pool.acquire()` and `fetchrow`: 140 us).
- **The 30 s body timeout is one timer per request** (`lbauth.server.BodyDeadline`): Tornado's
  `body_timeout` wrapped each body read in a task, a future and a timer, about 10 % of a token
  request's CPU.
- **Access tokens are signed without PyJWT's per-token checks** (`Signer.sign`: the same compact
  JWS, byte for byte).
- **Fewer statements.** The client's credentials are matched inside the statement that claims the
  code or finds the refresh token (by digest, like the token itself); only a failure runs a second
  unit of work to say which error applies. A code is issued under the live grant with one
  `INSERT ... SELECT`. On PostgreSQL the redemption is a single data-modifying CTE (`UPDATE ...
  RETURNING` feeding the refresh-token `INSERT`) in autocommit: one round trip.
- **Statements built once** with bind parameters: rebuilding a `select()` per call cost about 50 us
  of the 78 us SQLAlchemy spent per statement.
- **PostgreSQL pool without overflow**: overflow connections are closed on return, so a burst opened
  (and TLS-negotiated) a new connection per request.
- **Caches of rows that do not change**: user rows for `/api/auth/me` (never edited once created,
  kept at most 60 s), and verified access-token signatures (by the token's SHA-256, cleared when the
  key ring changes; expiry and the check-list are checked on every request). The `/me` figure above
  repeats one token, so it measures the cached path; a first-seen token adds one ES256 verification,
  about 70 us, the largest single cost of `/me` before the cache (39 % of its samples).

- Every request also updates its metrics (a counter and a latency histogram; with several
  workers through prometheus-client's shared files, so that any worker's `/metrics` reports the
  sum): about 5 % of the `/me` figure.

- **An OpenID code exchange signs an ID token too**, with the app's algorithm. RS256,
  the default that OpenID Connect makes every relying party accept, costs about 0.7 ms of CPU per
  signature here (2048-bit RSA: the `Signer.sign` line above), against about 0.05 ms for ES256 and
  EdDSA. On SQLite, where a plain exchange costs about 0.9 ms of CPU, the RS256 signature is close
  to half of an OpenID exchange, and the OpenID exchange runs at 0.53-0.57x the plain one; with
  ES256 (`lbauth apps update CLIENT_ID --id-token-alg ES256`) at 0.87-0.89x. On PostgreSQL the
  round trips weigh more and the ratio is higher. Nothing in the exchange can sign earlier: the ID
  token carries `at_hash`, the hash of the access token minted in that same request. Refreshes of
  an OpenID grant sign one too.

What limits the token endpoints (0.1-0.4x the ceiling):

- The load generator shares the two cores: wrk takes about a third of a core at these rates, the
  PostgreSQL backends most of another on the PostgreSQL runs.
- SQLite: every code exchange and authorization is a write, and SQLite has one write lock for all
  processes. Of a worker's time per exchange (about 420 us of CPU on a loaded 2-core machine),
  SQLite itself takes about a quarter (the commit writes six WAL pages: the code's row, the refresh
  token's row and three of its indexes), Tornado's HTTP parsing, routing and writing about 40 %,
  the ES256 signature about 10 %; our own Python around the unit of work under 5 %.
- PostgreSQL: SQLAlchemy's async connection checkout, greenlet hand-offs and result processing
  cost more than the round trip itself; the remaining gain would come from running the compiled
  statements on asyncpg directly, which we have not done (the design keeps SQLAlchemy).

## Reproduce

```
make bench                      # full runs (10 s each), SQLite then PostgreSQL, 2 workers
make bench BENCH_ARGS=--quick   # 5 s runs, under 5 minutes
python tools/bench.py --only http --workers 1   # the 1-worker figures
```

# Before and after

{HISTORY_MARKER}

{history}
"""
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="shorter runs (under 5 minutes in all)")
    parser.add_argument("--out", default=str(ROOT / "bench-results.json"))
    parser.add_argument("--only", choices=("verify", "http"), help="one part only")
    parser.add_argument("--growth", action="store_true",
                        help="instead: refresh latency with 1,000,000 refresh tokens and 100,000 grants")
    parser.add_argument("--workers", type=int, default=2, help="server processes (default %(default)s)")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--grants", type=int, default=1000,
                        help="users and apps of the many-grants runs (default %(default)s; 0: none)")
    parser.add_argument("--pg-url", default=os.environ.get("LBAUTH_TEST_POSTGRES_URL",
                                                           "postgresql+asyncpg://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--docs", default=str(ROOT / "docs" / "performance.md"),
                        help="where the table goes ('' for nowhere)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.exists() else {}
    if args.growth:
        import bench_http
        wrk = bench_http.ensure_wrk()
        results.setdefault("growth", {}).update(
            {b: bench_http.growth(wrk, 5, args.pg_url, b, 1_000_000, 100_000) for b in args.backends.split(",")})
        out.write_text(json.dumps(results, indent=2) + "\n")
        if args.docs and "runs" in results:
            write_docs(Path(args.docs), results, table(results) + "\n\n" + http_table(results))
        for backend, g in results["growth"].items():
            print(f"{backend}: refresh p50 {g['empty']['p50_ms']} ms empty, {g['filled']['p50_ms']} ms with "
                  f"{g['rows']['refresh_tokens']:,} refresh tokens and {g['rows']['grants']:,} grants "
                  f"(x{g['p50_ratio']}); {g['empty']['rps']} -> {g['filled']['rps']} req/s; fill {g['fill_seconds']} s")
        return 0
    if args.only in (None, "verify"):
        results.update(bench_verify(args.quick))
    if args.only in (None, "http"):
        import bench_http
        results.update(bench_http.run(args.quick, args.workers, args.backends.split(","), args.pg_url, args.grants))
        import bench_dpop
        results["dpop"] = {b: bench_dpop.run(b, 3 if args.quick else 5, 1 if args.quick else 3, args.pg_url,
                                             args.workers) for b in args.backends.split(",")}
        import bench_tracing
        results["tracing"] = {b: bench_tracing.run(b, 3 if args.quick else 5, 1 if args.quick else 3, args.pg_url,
                                                   args.workers) for b in args.backends.split(",")}
    results["machine"] = {"python": platform.python_version(), "platform": platform.platform(),
                          "cpus": __import__("os").cpu_count(), "quick": args.quick,
                          "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    out.write_text(json.dumps(results, indent=2) + "\n")
    report = table(results) + "\n\n" + http_table(results)
    print(report)
    print(f"\nwritten to {out}")
    if args.docs and all(part in results for part in ("verify_ops", "runs")):
        write_docs(Path(args.docs), results, report)
    elif args.docs:  # a partial run on a checkout without the other part's figures
        print(f"{args.docs} not rewritten: {out} lacks the figures of the parts not run this time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
