#!/usr/bin/env python3
"""Before/after HTTP figures of two lbauth trees in ONE run, alternated, for the 5 % rule.

One `tools/bench.py --only http` run per revision drifts 20-30 % between two runs of the same
revision on a shared 2-core machine (other processes, thermal, page cache). Here both trees' servers
run at once, and every endpoint is measured alternately against each (ABBA ABBA ...), so that drift
hits both alike; the figures are the medians over the rounds, and the spread is that of the paired
per-round ratios.

    python tools/bench_compare.py --before REV [--after REV_OR_DIR] [--rounds 5] [--seconds 5]
        [--backends sqlite,postgresql] [--workers 2] [--out bench-compare.json]

- `--before`, `--after`: a git revision (checked out with `git worktree add --detach` in a temporary
  directory, removed at the end) or a directory holding a checkout; `--after` defaults to this
  checkout (working tree as it is, uncommitted changes included).
- Each tree creates and seeds its own database with its own code (its tools/bench_http.py
  `Deployment`, in a subprocess with PYTHONPATH=<tree>) and runs its own server (`python -m lbauth
  serve`, cwd=<tree>), each on its own port, data directory and database.
- The load is this checkout's wrk scripts (tools/bench_http.py), the same for both trees.
  Consumable inputs (authorization codes, public clients' rotating refresh tokens) are split so that
  each round has its own; every run's non-2xx count is reported (it should be 0).

`--before HEAD` against this checkout (unchanged) shows the noise floor of the method.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlencode

TOOLS = Path(__file__).resolve().parent
ROOT = TOOLS.parent
sys.path[:0] = [str(TOOLS), str(ROOT)]  # this checkout's lbauth, not whichever one the venv points at

import bench_http  # noqa: E402
from bench_http import (  # noqa: E402
    EXCHANGE_LUA,
    FLOW_LUA,
    PUBLIC_CONNECTIONS,
    REDIRECT,
    ROTATE_LUA,
    ensure_wrk,
    free_port,
    public_refresh_tokens,
    refresh_form,
    run_wrk,
    token_set,
    wait_healthy,
)

ENDPOINTS = ("code_exchange", "openid_code_exchange", "openid_code_exchange_es256", "refresh", "me", "authorize",
             "full_flow", "public_refresh")  # endpoint_runs' order: public_refresh last (its rows grow the WAL)
CODE_KINDS = {"code_exchange": "codes", "openid_code_exchange": "openid_codes",
              "openid_code_exchange_es256": "openid_es256_codes"}
SEED_KEYS = ("codes", "openid_codes", "openid_es256_codes", "public_codes", "client_id", "client_secret",
             "user_token", "public_client_id", "app_id")
CONNECTIONS = 32  # endpoint_runs' (public_refresh: PUBLIC_CONNECTIONS)

# Run by each tree's own interpreter environment (PYTHONPATH=<tree>:<tree>/tools, cwd=<tree>): that
# tree's Deployment creates and seeds the database. The first line names the database (so that the
# parent can drop it whatever happens next), the last one is the seeds as JSON. Extra seeds (a user,
# apps, one code each and PUBLIC_TOKENS public codes) give each round its own public refresh tokens.
SEED_SCRIPT = r"""
import asyncio, json, sys
from pathlib import Path
import bench_http, lbauth
tree, backend, workers, data_dir, pg_url, codes_per_thread, extra = sys.argv[1:8]
where = Path(lbauth.__file__).resolve()
if not where.is_relative_to(Path(tree).resolve()):
    raise SystemExit(f"lbauth imported from {where}, not from {tree}")
d = bench_http.Deployment(backend, int(workers), Path(data_dir), pg_url)
print("DATABASE " + json.dumps(d.database_url), flush=True)
asyncio.run(d.create_database())
seeds = [asyncio.run(d.seed(codes_per_thread=int(codes_per_thread)))]
seeds += [asyncio.run(d.seed(codes_per_thread=1)) for _ in range(int(extra))]
env = {k: v for k, v in d.env.items() if k.startswith("LBAUTH_")}
print("SEEDS " + json.dumps({"database_url": d.database_url, "env": env, "seeds": seeds}), flush=True)
"""


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def describe(tree: Path) -> dict:
    try:
        commit = git("rev-parse", "HEAD", cwd=tree)
        dirty = bool(git("status", "--porcelain", "--untracked-files=no", cwd=tree))
    except (subprocess.CalledProcessError, FileNotFoundError):
        return {"path": str(tree)}
    return {"path": str(tree), "commit": commit, "dirty": dirty}


class Tree:
    """One side of the comparison: a checkout, then per backend its database and its server."""

    def __init__(self, label: str, spec: str | None, scratch: Path) -> None:
        self.label, self.spec, self.worktree = label, spec or str(ROOT), None
        if spec is None:
            self.path = ROOT
        elif Path(spec).is_dir():
            self.path = Path(spec).resolve()
        else:
            commit = git("rev-parse", "--verify", spec + "^{commit}")
            self.path = self.worktree = scratch / f"{label}-{commit[:10]}"
            git("worktree", "add", "--detach", str(self.path), commit)
        if not (self.path / "lbauth").is_dir() or not (self.path / "tools" / "bench_http.py").is_file():
            raise SystemExit(f"{self.path}: not an lbauth checkout with tools/bench_http.py")
        self.info = {"spec": self.spec, **describe(self.path)}
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("LBAUTH_")}
        self.env["PYTHONPATH"] = os.pathsep.join([str(self.path), str(self.path / "tools")])
        self.proc: subprocess.Popen | None = None
        self.database_url: str | None = None

    def remove(self) -> None:
        if self.worktree:
            subprocess.run(["git", "worktree", "remove", "--force", str(self.worktree)], cwd=ROOT,
                           capture_output=True, check=False)

    def seed(self, backend: str, workers: int, data_dir: Path, pg_url: str, codes_per_thread: int,
             extra: int) -> None:
        self.data_dir = data_dir
        started = time.monotonic()
        out = subprocess.run([sys.executable, "-c", SEED_SCRIPT, str(self.path), backend, str(workers), str(data_dir),
                              pg_url, str(codes_per_thread), str(extra)], cwd=self.path, env=self.env,
                             capture_output=True, text=True, check=False)
        for line in out.stdout.splitlines():
            if line.startswith("DATABASE "):
                self.database_url = json.loads(line[len("DATABASE "):])
        last = out.stdout.rstrip().rpartition("\n")[2]
        if out.returncode or not last.startswith("SEEDS "):
            raise SystemExit(f"{self.label} ({self.path}): seeding failed ({out.returncode}):\n{out.stderr[-3000:]}")
        found = json.loads(last[len("SEEDS "):])
        self.seeds = found["seeds"]
        missing = [k for k in SEED_KEYS if k not in self.seeds[0]]
        if missing:
            raise SystemExit(f"{self.label}: its seed has no {missing}")
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.server_env = {**self.env, **found["env"], "LBAUTH_PORT": str(port), "LBAUTH_BASE_URL": self.url,
                           "LBAUTH_DATABASE_URL": found["database_url"], "LBAUTH_DATA_DIR": str(data_dir),
                           "LBAUTH_WORKERS": str(workers), "LBAUTH_LOG_LEVEL": "WARNING",
                           "LBAUTH_RATE_LIMITS": "off", "LBAUTH_ENV": "development"}
        self.seed_seconds = round(time.monotonic() - started, 1)

    def start(self) -> None:
        log = open(self.data_dir / "server.log", "ab")  # noqa: SIM115 - kept for the child
        self.proc = subprocess.Popen([sys.executable, "-m", "lbauth", "serve"], cwd=self.path, env=self.server_env,
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_healthy(self.url + "/healthz", self.proc)

    def stop(self) -> None:
        if self.proc:
            bench_http.stop(self.proc)
            self.proc = None

    def drop_database(self, pg_url: str) -> None:
        if self.database_url and self.database_url.startswith("postgresql"):
            import asyncio

            import asyncpg
            from sqlalchemy.engine import make_url

            async def drop() -> None:
                admin = await asyncpg.connect(make_url(pg_url).set(drivername="postgresql")
                                              .render_as_string(hide_password=False))
                try:
                    name = make_url(self.database_url).database
                    await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                finally:
                    await admin.close()
            asyncio.run(drop())
        self.database_url = None

    def prepare(self, rounds: int, per_round: int, endpoints: list[str]) -> dict[str, list[tuple[str, list[str]]]]:
        """wrk scripts and arguments, per endpoint and round (each round its own codes and tokens)."""
        seed = self.seeds[0]
        scripts = self.data_dir / "wrk"
        scripts.mkdir(exist_ok=True)

        def script(name: str, lua: str, **globals_: str) -> str:
            path = scripts / f"{name}.lua"
            path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in globals_.items()) + lua)
            return str(path)

        credentials = urlencode({"redirect_uri": REDIRECT, "client_id": seed["client_id"],
                                 "client_secret": seed["client_secret"]})
        authorize_body = json.dumps({"clientId": seed["client_id"], "redirectUri": REDIRECT, "scope": ["userinfo"],
                                     "state": "bench"})
        static = "\nfunction request()\n  return wrk.format(method, path, headers, body)\nend\n"
        plan: dict[str, list[tuple[str, list[str]]]] = {}
        for endpoint, kind in CODE_KINDS.items():
            if endpoint not in endpoints:
                continue
            exchange = script("exchange", EXCHANGE_LUA, args_tail=credentials)
            plan[endpoint] = []
            for k in range(rounds):
                base = scripts / f"{kind}-r{k}"
                for thread, codes in enumerate(seed[kind]):
                    Path(f"{base}.{thread}").write_text("\n".join(codes[k * per_round:(k + 1) * per_round]) + "\n")
                plan[endpoint].append((exchange, [str(base)]))
        tokens = token_set(self.url, seed)
        form = "headers = {['Content-Type'] = 'application/x-www-form-urlencoded'}\n"
        fixed = {
            "refresh": script("refresh", form + static, method="POST", path="/api/oauth/token/refresh",
                              body=refresh_form(tokens, seed)),
            "me": script("me", f"headers = {{['Authorization'] = 'Bearer {tokens['accessToken']}'}}\n" + static,
                         method="GET", path="/api/auth/me", body=""),
            "authorize": script("authorize", f"headers = {{['Content-Type'] = 'application/json', "
                                f"['Authorization'] = 'Bearer {seed['user_token']}'}}\n" + static,
                                method="POST", path="/api/oauth/authorize/external", body=authorize_body),
            "full_flow": script("flow", FLOW_LUA, user_token=seed["user_token"], authorize_body=authorize_body,
                                exchange_tail=credentials),
        }
        for endpoint, path in fixed.items():
            if endpoint in endpoints:
                plan[endpoint] = [(path, [])] * rounds
        if "public_refresh" in endpoints:
            plan["public_refresh"] = []
            for k in range(rounds):  # a round's tokens are spent (rotated) by its run: each round its own seed's
                round_seed = self.seeds[k]
                public = public_refresh_tokens(self.url, round_seed)
                base = scripts / f"public-refresh-r{k}"
                for thread in range(2):  # wrk -t2: one file per thread, one token per connection
                    Path(f"{base}.{thread}").write_text("\n".join(public[thread::2]) + "\n")
                plan["public_refresh"].append((script(f"public-refresh-r{k}", ROTATE_LUA,
                                                      client_id=round_seed["public_client_id"]), [str(base)]))
        return plan


def metric(endpoint: str, run: dict) -> float:
    return run["flows_per_s"] if endpoint == "full_flow" else run["rps"]


TICKS = os.sysconf("SC_CLK_TCK")


def group_cpu(pgid: int) -> dict[int, int]:
    """CPU time (user + system, clock ticks) of each live process of a process group: a server's
    supervisor and its workers (`lbauth serve` forks them in its own group)."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(entry.path, "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[2]) == pgid:  # fields after the name: state, ppid, pgrp, ... utime (11), stime (12)
            found[int(entry.name)] = int(fields[11]) + int(fields[12])
    return found


def measured(wrk: str, tree: Tree, endpoint: str, seconds: int, connections: int, script: str,
             script_args: list[str]) -> dict:
    """One wrk run, and the server's CPU time per 2xx request (per flow for full_flow) meanwhile:
    unlike req/s, it hardly moves when other work takes CPU time from the machine. The database's
    own processes are not counted (PostgreSQL's backends; SQLite works inside the workers)."""
    cpu_before = group_cpu(tree.proc.pid)
    run = run_wrk(wrk, tree.url, seconds, connections, script, script_args or None)
    cpu_after = group_cpu(tree.proc.pid)
    ticks = sum(t - cpu_before.get(pid, 0) for pid, t in cpu_after.items())
    done = metric(endpoint, run) * seconds
    run["server_cpu_us"] = round(ticks / TICKS * 1e6 / done) if done else None
    return run


def summarize(endpoint: str, before: list[dict], after: list[dict]) -> dict:
    b = [metric(endpoint, r) for r in before]
    a = [metric(endpoint, r) for r in after]
    paired = [y / x if x else math.inf for x, y in zip(b, a, strict=True)]
    median_b, median_a = statistics.median(b), statistics.median(a)
    cpu_b = [r["server_cpu_us"] or math.inf for r in before]
    cpu_a = [r["server_cpu_us"] or math.inf for r in after]
    cpu_paired = [y / x for x, y in zip(cpu_b, cpu_a, strict=True)]
    return {
        "unit": "flows/s" if endpoint == "full_flow" else "req/s",
        "before": round(median_b), "after": round(median_a),
        "ratio": round(median_a / median_b, 3) if median_b else None,  # after / before, medians
        "ratio_min": round(min(paired), 3), "ratio_median": round(statistics.median(paired), 3),
        "ratio_max": round(max(paired), 3),
        # Server CPU time per request (per flow): after/before above 1 means the after tree spends more.
        "cpu_us": {"before": round(statistics.median(cpu_b)), "after": round(statistics.median(cpu_a))},
        "cpu_ratio": round(statistics.median(cpu_a) / statistics.median(cpu_b), 3),
        "cpu_ratio_min": round(min(cpu_paired), 3), "cpu_ratio_max": round(max(cpu_paired), 3),
        "non2xx": {"before": sum(r["non2xx"] for r in before), "after": sum(r["non2xx"] for r in after)},
        "socket_errors": {"before": sum(r["socket_errors"] for r in before),
                          "after": sum(r["socket_errors"] for r in after)},
        "runs": {"before": before, "after": after},
    }


def compare_backend(wrk: str, trees: list[Tree], backend: str, args: argparse.Namespace, scratch: Path,
                    endpoints: list[str]) -> dict:
    # Codes per wrk thread and round: `seconds` at up to `--codes-rps` exchanges/s over wrk's two threads,
    # and a fifth more (the threads do not share the load exactly).
    per_round = math.ceil(args.seconds * args.codes_rps / 2 * 1.2)
    codes_per_thread = per_round * args.rounds if any(e in CODE_KINDS for e in endpoints) else 1
    extra = args.rounds - 1 if "public_refresh" in endpoints else 0
    for tree in trees:
        directory = scratch / f"{tree.label}-{backend}"
        directory.mkdir()
        tree.data_dir = directory
    try:
        print(f"[{backend}] seeding both trees ({codes_per_thread} codes per thread and kind) ...", flush=True)
        with ThreadPoolExecutor(len(trees)) as pool:  # each its own database: at once
            for f in [pool.submit(t.seed, backend, args.workers, t.data_dir, args.pg_url, codes_per_thread, extra)
                      for t in trees]:
                f.result()
        for tree in trees:
            tree.start()
        plans = [t.prepare(args.rounds, per_round, endpoints) for t in trees]
        # Unmeasured: a fresh server opens its pooled connections on demand, and a worker reads a
        # token's session once before caching it. Authorize (a write) then /me, on both trees alike.
        for tree, plan in zip(trees, plans, strict=True):
            for endpoint in ("authorize", "me"):
                if endpoint in plan and args.warmup:
                    run_wrk(wrk, tree.url, args.warmup, CONNECTIONS, plan[endpoint][0][0], plan[endpoint][0][1])
        found: dict = {}
        for endpoint in endpoints:
            connections = PUBLIC_CONNECTIONS if endpoint == "public_refresh" else CONNECTIONS
            runs: list[list[dict]] = [[], []]
            for k in range(args.rounds):
                order = (0, 1) if k % 2 == 0 else (1, 0)  # ABBA ABBA ...: a linear drift cancels out
                for side in order:
                    time.sleep(args.pause)
                    script, script_args = plans[side][endpoint][k]
                    runs[side].append(measured(wrk, trees[side], endpoint, args.seconds, connections, script,
                                               script_args))
            found[endpoint] = summarize(endpoint, runs[0], runs[1])
            print(line(backend, endpoint, found[endpoint]), flush=True)
        return found
    finally:
        for tree in trees:
            tree.stop()
        for tree in trees:
            try:
                tree.drop_database(args.pg_url)
            except Exception as exc:  # noqa: BLE001 - report, go on cleaning up
                print(f"could not drop {tree.database_url}: {exc}", file=sys.stderr)


HEADER = (f"{'backend':<11} {'endpoint':<27} {'before':>7} {'after':>7} {'ratio':>6} {'min-max':>13} | "
          f"{'cpu us b':>8} {'a':>6} {'ratio':>6} {'min-max':>13} | non-2xx b/a")


def line(backend: str, endpoint: str, r: dict) -> str:
    flag = "" if r["non2xx"]["before"] == r["non2xx"]["after"] == 0 else "  <- non-2xx!"
    return (f"{backend:<11} {endpoint:<27} {r['before']:>7} {r['after']:>7} {r['ratio']:>6} "
            f"{r['ratio_min']:>6}-{r['ratio_max']:<6} | {r['cpu_us']['before']:>8} {r['cpu_us']['after']:>6} "
            f"{r['cpu_ratio']:>6} {r['cpu_ratio_min']:>6}-{r['cpu_ratio_max']:<6} | "
            f"{r['non2xx']['before']}/{r['non2xx']['after']}{flag}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="git revision or checkout directory")
    parser.add_argument("--after", help="git revision or checkout directory (default: this checkout)")
    parser.add_argument("--rounds", type=int, default=5, help="runs per tree and endpoint (default %(default)s)")
    parser.add_argument("--seconds", type=int, default=5, help="length of each wrk run (default %(default)s)")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--endpoints", default=",".join(ENDPOINTS), help="a subset of: " + ",".join(ENDPOINTS))
    parser.add_argument("--workers", type=int, default=2, help="server processes per tree (default %(default)s)")
    parser.add_argument("--warmup", type=int, default=2,
                        help="unmeasured seconds of authorize and of /me per tree first (default %(default)s)")
    parser.add_argument("--pause", type=float, default=0.5, help="seconds of quiet before each run")
    parser.add_argument("--codes-rps", type=int, default=3000,
                        help="code exchanges/s the seed must cover in each run (default %(default)s)")
    parser.add_argument("--pg-url", default=os.environ.get("LBAUTH_TEST_POSTGRES_URL",
                                                           "postgresql+asyncpg://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--out", default="bench-compare.json")
    args = parser.parse_args(argv)
    endpoints = [e for e in args.endpoints.split(",") if e]
    unknown = set(endpoints) - set(ENDPOINTS)
    if unknown or args.rounds < 1 or args.seconds < 1:
        parser.error(f"unknown endpoints {sorted(unknown)}" if unknown else "--rounds and --seconds: 1 or more")
    endpoints = [e for e in ENDPOINTS if e in endpoints]
    wrk = ensure_wrk()
    started = time.monotonic()
    results: dict = {"load_average_at_start": os.getloadavg(), "cpus": os.cpu_count(), "rounds": args.rounds,
                     "seconds": args.seconds, "workers": args.workers,
                     "order": "ABBA (before first in even rounds)", "load_generator": "wrk -t2, 32 connections",
                     "ratio": "after/before of the medians; ratio_min/median/max: of the per-round pairs",
                     "cpu_us": "server processes' CPU time per 2xx request (per flow), microseconds",
                     "results": {}}
    with tempfile.TemporaryDirectory(prefix="lbauth-bench-compare-") as tmp:
        scratch = Path(tmp)
        trees: list[Tree] = []
        try:
            trees.append(Tree("before", args.before, scratch))
            trees.append(Tree("after", args.after, scratch))
            results["before"], results["after"] = trees[0].info, trees[1].info
            for tree in trees:
                print(f"{tree.label}: {tree.info}", flush=True)
            print(HEADER, flush=True)
            for backend in [b for b in args.backends.split(",") if b]:
                results["results"][backend] = compare_backend(wrk, trees, backend, args, scratch, endpoints)
                results.setdefault("seed_seconds", {})[backend] = {t.label: t.seed_seconds for t in trees}
        finally:
            for tree in trees:
                tree.stop()
                tree.remove()
    results["elapsed_seconds"] = round(time.monotonic() - started)
    results["load_average_at_end"] = os.getloadavg()
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print()
    print(f"before: {results['before']}\nafter:  {results['after']}")
    print(f"{args.rounds} rounds of {args.seconds} s per tree and endpoint, alternated; medians; ratio "
          f"after/before; min-max of the per-round ratios. req/s (flows/s for full_flow), then the server's "
          f"CPU time per request (per flow)")
    print(HEADER)
    wide = []
    for backend, per_endpoint in results["results"].items():
        for endpoint, r in per_endpoint.items():
            print(line(backend, endpoint, r))
            if r["ratio_max"] - r["ratio_min"] > 0.1:
                wide.append(f"{backend} {endpoint}")
    load = results["load_average_at_start"][0], results["load_average_at_end"][0]
    print(f"\nload average (1 min) {load[0]:.2f} at the start, {load[1]:.2f} at the end, {os.cpu_count()} CPUs")
    if wide:
        print(f"req/s ratios of single rounds spread over more than 10 points ({len(wide)} of "
              f"{sum(map(len, results['results'].values()))}): the machine was not quiet enough for a 5 % "
              f"verdict on req/s; see the CPU columns, or run again with more rounds on a quieter machine")
    print(f"{results['elapsed_seconds']} s in all; written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
