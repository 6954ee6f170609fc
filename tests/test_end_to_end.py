"""What a newcomer and an operator do first: `make run` twice, and a plain `pip install` of the
wheel serving from an unrelated directory."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest
import requests

from tests.conftest import ROOT
from tests.processes import free_port

pytestmark = pytest.mark.slow


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


def _stop(proc: subprocess.Popen) -> str | None:
    if proc.poll() is not None:
        return proc.communicate()[0]
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    return out


def _make_run(tmp_path: Path, port: int, out: Path) -> subprocess.Popen:
    """`make run`, its output going to `out` (read while it serves)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LBAUTH_")}
    env.update(LBAUTH_DATA_DIR=str(tmp_path / "var"), LBAUTH_PORT=str(port), MAKEFLAGS="")
    with open(out, "w") as sink:
        return subprocess.Popen(["make", "--no-print-directory", "run"], cwd=ROOT, env=env, stdout=sink,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _demo_works(url: str, authorize_url: str, client_id: str, client_secret: str, password: str) -> None:
    """What a newcomer does with what `make run` printed: open the printed address (the sign-in page
    for the demo app), sign in as the demo user, and run the app's side of the flow with its secret."""
    page = requests.get(authorize_url, allow_redirects=False, timeout=10)
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html"), page.status_code
    assert 'action="/login"' in page.text and "Demo App" in page.text
    r = requests.post(url + "/api/auth/login", json={"email": "demo@example.com", "password": password}, timeout=10)
    assert r.status_code == 200, r.text
    user_token = r.json()["data"]["token"]
    r = requests.post(url + "/api/oauth/authorize/external", headers={"Authorization": f"Bearer {user_token}"},
                      json={"clientId": client_id, "redirectUri": "http://localhost:8080/callback",
                            "scope": ["userinfo"], "state": "s"}, timeout=10)
    assert r.status_code == 200, r.text
    r = requests.post(url + "/api/oauth/token/code", timeout=10, data={
        "grant_type": "authorization_code", "code": r.json()["data"]["code"],
        "redirect_uri": "http://localhost:8080/callback", "client_id": client_id, "client_secret": client_secret})
    assert r.status_code == 200, r.text
    me = requests.get(url + "/api/auth/me", headers={"Authorization": f"Bearer {r.json()['data']['accessToken']}"},
                      timeout=10)
    assert me.status_code == 200 and me.json()["data"]["email"] == "demo@example.com", me.text


def test_make_run_twice(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    first = _make_run(tmp_path, port, tmp_path / "first.out")
    try:
        _wait_healthy(url, first, 60)  # raises unless it serves within 60 s
        out1 = (tmp_path / "first.out").read_text()
        password = re.search(r"password: (\S+)", out1)
        client_secret = re.search(r"client_secret: (lba_cs_\S+)", out1)
        opened = re.search(rf"open\s+(http://127\.0\.0\.1:{port}/oauth/\?client_id=(cid_[A-Za-z0-9_]+)\S*)", out1)
        assert password and client_secret and opened, out1
        _demo_works(url, opened.group(1), opened.group(2), client_secret.group(1), password.group(1))
    finally:
        _stop(first)

    second = _make_run(tmp_path, port, tmp_path / "second.out")
    try:
        _wait_healthy(url, second, 60)
        out2 = (tmp_path / "second.out").read_text()
        # The same user and app, kept: what the first run printed still works.
        assert f"client_id: {opened.group(2)}" in out2, out2
        _demo_works(url, opened.group(1), opened.group(2), client_secret.group(1), password.group(1))
    finally:
        _stop(second)
    out2 = (tmp_path / "second.out").read_text()
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
    port = free_port()
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
