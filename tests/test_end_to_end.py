"""What a newcomer and an operator do first: `make run` twice, and a plain `pip install` of the
wheel serving from an unrelated directory."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, seconds: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=2) as r:
                if r.status == 200:
                    return time.monotonic() - started
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"/healthz not served within {seconds} s")


def _stop(proc: subprocess.Popen) -> str:
    if proc.poll() is not None:
        return proc.communicate()[0]
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    return out


def _make_run(tmp_path: Path, port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LBAUTH_")}
    env.update(LBAUTH_DATA_DIR=str(tmp_path / "var"), LBAUTH_PORT=str(port), MAKEFLAGS="")
    return subprocess.Popen(["make", "--no-print-directory", "run"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def test_make_run_twice(tmp_path):
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    first = _make_run(tmp_path, port)
    try:
        assert _wait_healthy(url, first, 60) < 60
    finally:
        out1 = _stop(first)
    password = re.search(r"password: (\S+)", out1)
    client_secret = re.search(r"client_secret: (lba_cs_\S+)", out1)
    assert password and client_secret, out1
    assert re.search(rf"open\s+http://127\.0\.0\.1:{port}/oauth/\?client_id=cid_", out1)

    second = _make_run(tmp_path, port)
    try:
        _wait_healthy(url, second, 60)
    finally:
        out2 = _stop(second)
    assert password.group(1) not in out2 and client_secret.group(1) not in out2
    assert "lba_cs_" not in out2 and "lba_whs_" not in out2 and "password:" not in out2
    assert "rotate-secret" in out2  # and it says how to get a new secret


def test_wheel_installs_a_complete_server(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
                   check=True, cwd=tmp_path, timeout=300)
    wheel = next(dist.glob("lbauth-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    sources = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "lbauth").rglob("*.py"))
    assert [s for s in sources if s not in names] == []  # every module ships (pyproject lists packages)
    assert "lbauth/storage/migrations/env.py" in names
    assert any(n.startswith("lbauth/storage/migrations/versions/0001") for n in names)
    assert "lbauth/storage/migrations/script.py.mako" in names
    for folder in ("templates", "static"):
        shipped = sorted(p.name for p in (ROOT / folder).iterdir() if p.is_file())
        assert shipped, folder
        for name in shipped:
            assert f"lbauth/{folder}/{name}" in names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    str(wheel)], check=True, timeout=600)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LBAUTH_")}
    # production (the default): https public URLs, TLS ending at a proxy in front of the loopback listener
    env.update(LBAUTH_PORT=str(port), LBAUTH_DATA_DIR=str(tmp_path / "data"), LBAUTH_BASE_URL="https://auth.example.test")
    proc = subprocess.Popen([str(venv / "bin" / "lbauth"), "serve"], cwd=elsewhere, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_healthy(f"http://127.0.0.1:{port}", proc, 60)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/.well-known/jwks.json", timeout=5) as r:
            assert b'"keys"' in r.read()
    finally:
        _stop(proc)
