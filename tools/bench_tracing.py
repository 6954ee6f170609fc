"""What tracing costs a request: the code exchange at /oauth/token (one SERVER span and its SQL
statements' CLIENT spans) on one deployment, restarted in three modes, alternated round by round:

- off       LBAUTH_OTEL unset (the figures `make bench` keeps within 5 % of the last release's)
- spans     LBAUTH_OTEL=on, OTEL_TRACES_EXPORTER=none: every span made and ended, none exported
- otlp      LBAUTH_OTEL=on, exported over OTLP/HTTP (batched) to a receiver in this process that
            reads and drops each batch: what a deployment with a collector pays

For each: requests per second (2xx only; wrk, as tools/bench_http.py) and the server's CPU time per
request (user + system of every process of the server, workers and exporter threads included, from
/proc), with the overhead over `off`.

    python tools/bench_tracing.py [--backends sqlite,postgresql] [--seconds 5] [--rounds 3] [--workers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
sys.path[:0] = [str(TOOLS), str(TOOLS.parent)]

import bench_http  # noqa: E402
import bench_prototype  # noqa: E402
from bench_dpop import TOKEN_LUA  # noqa: E402
from bench_http import REDIRECT, Deployment, ensure_wrk, run_wrk  # noqa: E402

MAX_RPS = 6000  # exchanges/s a run's codes must cover
MODES = ("off", "spans", "otlp")


class DiscardingCollector:
    """An OTLP/HTTP endpoint that reads every batch and drops it (its CPU is this process's)."""

    def __init__(self) -> None:
        self.batches = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                owner.batches += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def cpu_seconds(process_group: int) -> float:
    """User + system CPU of every live process of the group (the supervisor and its workers)."""
    return bench_prototype.cpu_seconds(process_group)[0]


def configure(deployment: Deployment, mode: str, collector: DiscardingCollector) -> None:
    for name in [k for k in deployment.env if k.startswith("OTEL_") or k == "LBAUTH_OTEL"]:
        del deployment.env[name]
    if mode == "off":
        return
    deployment.env.update(LBAUTH_OTEL="on", OTEL_SERVICE_NAME="lbauth-bench")
    if mode == "spans":
        deployment.env["OTEL_TRACES_EXPORTER"] = "none"
    else:
        deployment.env.update(OTEL_TRACES_EXPORTER="otlp", OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint)


def run(backend: str, seconds: int, rounds: int, pg_url: str, workers: int) -> dict:
    wrk = ensure_wrk()
    per_run = seconds * MAX_RPS // 2 + 1000  # per wrk thread
    collector = DiscardingCollector()
    with tempfile.TemporaryDirectory(prefix="lbauth-bench-tracing-") as tmp:
        directory = Path(tmp)
        deployment = Deployment(backend, workers, directory, pg_url)
        asyncio.run(deployment.create_database())
        try:
            seed = asyncio.run(deployment.seed(codes_per_thread=len(MODES) * rounds * per_run, openid_codes=False))
            basic = "Basic " + bench_http.base64.b64encode(
                f"{seed['client_id']}:{seed['client_secret']}".encode()).decode()
            script = directory / "token.lua"
            script.write_text(f"basic = {json.dumps(basic)}\nredirect_uri = {json.dumps(REDIRECT)}\n"
                              "dpop = false\n" + TOKEN_LUA)
            results: dict[str, list[dict]] = {mode: [] for mode in MODES}
            for index, mode in enumerate(list(MODES) * rounds):
                lines_file = directory / f"lines-{index}"
                for thread, codes in enumerate(seed["codes"]):
                    mine = codes[index * per_run:(index + 1) * per_run]
                    Path(f"{lines_file}.{thread}").write_text("\n".join(f"{code} -" for code in mine) + "\n")
                configure(deployment, mode, collector)
                deployment.start()
                try:
                    assert deployment.proc is not None
                    before = cpu_seconds(deployment.proc.pid)
                    found = run_wrk(wrk, deployment.url, seconds, 32, str(script), [str(lines_file)])
                    used = cpu_seconds(deployment.proc.pid) - before
                finally:
                    deployment.stop()
                requests = found["total_rps"] * seconds
                found["cpu_us_per_request"] = round(used / max(requests, 1) * 1e6, 1)
                results[mode].append(found)
        finally:
            asyncio.run(deployment.drop_database())
            collector.stop()
    figures: dict = {}
    for mode in MODES:
        figures[f"{mode}_rps"] = round(statistics.median(r["rps"] for r in results[mode]))
        figures[f"{mode}_cpu_us_per_request"] = round(statistics.median(r["cpu_us_per_request"]
                                                                        for r in results[mode]), 1)
    for mode in MODES[1:]:
        figures[f"{mode}_rps_ratio"] = round(figures[f"{mode}_rps"] / max(figures["off_rps"], 1), 3)
        figures[f"{mode}_cpu_us_added"] = round(figures[f"{mode}_cpu_us_per_request"]
                                                - figures["off_cpu_us_per_request"], 1)
    figures["otlp_batches_received"] = collector.batches
    figures["non2xx"] = sum(r["non2xx"] for runs in results.values() for r in runs)
    figures["runs"] = results
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pg-url", default="postgresql+asyncpg://postgres@127.0.0.1:5432/test")
    parser.add_argument("--out", help="also write the figures as JSON to this file")
    args = parser.parse_args()
    found = {backend: run(backend, args.seconds, args.rounds, args.pg_url, args.workers)
             for backend in args.backends.split(",")}
    for backend, figures in found.items():
        print(backend, {k: v for k, v in figures.items() if k != "runs"})
    if args.out:
        Path(args.out).write_text(json.dumps(found, indent=2) + "\n")
    return 0 if all(f["non2xx"] == 0 for f in found.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
