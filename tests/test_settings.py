"""Settings (contract section 1): flags over LBAUTH_* over TOML over defaults; every bad value stops
the `lbauth` command with one readable line that names the setting."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from lbauth import settings
from lbauth.settings import SettingsError
from tests.conftest import ROOT, run_cli
from tests.processes import free_port


def test_defaults_match_the_contract(tmp_path):
    s = settings.load({}, environ={})
    assert (s.host, s.port) == ("127.0.0.1", 8000)
    assert s.data_dir == Path("./var")
    assert s.database_url == f"sqlite+aiosqlite:///{Path('./var').resolve() / 'lbauth.db'}"
    assert s.base_url == s.auth_url == s.issuer == s.audience == "http://127.0.0.1:8000"
    assert (s.code_ttl, s.access_token_ttl, s.refresh_token_ttl, s.user_token_ttl) == (300, 7200, 2592000, 2592000)
    assert s.signing_alg == "ES256" and s.env == "production" and s.workers == 1
    assert s.max_body_bytes == 1024 * 1024 and s.webhook_timeout == 10 and s.rate_limits is True
    assert 2.5 * 86400 <= sum(s.webhook_retry_schedule) <= 3.5 * 86400  # "about 3 days in all"
    assert s.argon2 == (3, 65536, 4)  # RFC 9106's second recommended option


def test_flags_beat_environment_beat_file_beat_defaults(tmp_path):
    config = tmp_path / "lbauth.toml"
    config.write_text('port = 7000\nhost = "0.0.0.0"\ncode_ttl = 120\nsigning_alg = "RS256"\n')
    env = {"LBAUTH_PORT": "7100", "LBAUTH_CODE_TTL": "60"}
    s = settings.load({"port": "7200", "config": str(config)}, environ=env)
    assert s.port == 7200  # flag
    assert s.code_ttl == 60  # environment over file
    assert s.host == "0.0.0.0" and s.signing_alg == "RS256"  # file over defaults
    assert s.access_token_ttl == 7200  # default
    assert s.base_url == "http://0.0.0.0:7200"


def test_derived_urls_follow_base_url():
    s = settings.load({}, environ={"LBAUTH_BASE_URL": "https://auth.example.com/"})
    assert s.base_url == s.auth_url == s.issuer == s.audience == "https://auth.example.com"
    s = settings.load({}, environ={"LBAUTH_BASE_URL": "https://api.example.com",
                                   "LBAUTH_AUTH_URL": "https://login.example.com"})
    assert s.auth_url == "https://login.example.com" and s.issuer == "https://api.example.com"


def test_toml_file_may_use_an_lbauth_table(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('[lbauth]\nport = 9001\nrate_limits = false\nwebhook_retry_schedule = [5, 10]\n')
    s = settings.load({"config": str(config)}, environ={})
    assert s.port == 9001 and s.rate_limits is False and s.webhook_retry_schedule == (5, 10)


@pytest.mark.parametrize("env, named", [
    ({"LBAUTH_PORT": "70000"}, "LBAUTH_PORT"),
    ({"LBAUTH_PORT": "eighty"}, "LBAUTH_PORT"),
    ({"LBAUTH_SIGNING_ALG": "HS256"}, "LBAUTH_SIGNING_ALG"),
    ({"LBAUTH_SIGNING_ALG": "none"}, "LBAUTH_SIGNING_ALG"),
    ({"LBAUTH_DATABASE_URL": "mysql://root@localhost/db"}, "LBAUTH_DATABASE_URL"),
    ({"LBAUTH_DATABASE_URL": "postgresql+asyncpg:///nohost"}, "LBAUTH_DATABASE_URL"),
    ({"LBAUTH_DATABASE_URL": "sqlite+aiosqlite://relative.db"}, "LBAUTH_DATABASE_URL"),
    ({"LBAUTH_ACCESS_TOKEN_TTL": "2h"}, "LBAUTH_ACCESS_TOKEN_TTL"),
    ({"LBAUTH_CODE_TTL": "0"}, "LBAUTH_CODE_TTL"),
    ({"LBAUTH_CODE_TTL": "86400"}, "LBAUTH_CODE_TTL"),
    ({"LBAUTH_ENV": "staging"}, "LBAUTH_ENV"),
    ({"LBAUTH_WORKERS": "0"}, "LBAUTH_WORKERS"),
    ({"LBAUTH_RATE_LIMITS": "maybe"}, "LBAUTH_RATE_LIMITS"),
    ({"LBAUTH_WEBHOOK_RETRY_SCHEDULE": "10,x,30"}, "LBAUTH_WEBHOOK_RETRY_SCHEDULE"),
    ({"LBAUTH_BASE_URL": "ftp://example.com"}, "LBAUTH_BASE_URL"),
    ({"LBAUTH_ARGON2": "m=65536"}, "LBAUTH_ARGON2"),
    ({"LBAUTH_ARGON2": "t=0,m=65536,p=4"}, "LBAUTH_ARGON2"),
    ({"LBAUTH_ARGON2": "t=1,m=8,p=2"}, "LBAUTH_ARGON2"),  # 8 KiB per lane at least
    ({"LBAUTH_ARGON2": "t=1,m=9999999,p=1"}, "LBAUTH_ARGON2"),
])
def test_bad_values_are_refused_naming_the_setting(env, named):
    with pytest.raises(SettingsError) as info:
        settings.load({}, environ=env)
    message = str(info.value)
    assert message.startswith(named + ":") and "\n" not in message


def test_the_argon2_cost_is_read_in_any_spacing():
    assert settings.load({}, environ={"LBAUTH_ARGON2": " t=2, m=19456, p=1 "}).argon2 == (2, 19456, 1)
    assert settings.load({"argon2": "t=4,m=16,p=2"}, environ={}).argon2 == (4, 16, 2)


def _assert_one_line_error(result, *needles: str) -> None:
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("args, env, needles", [
    (["serve", "--port", "99999"], {}, ["--port", "65535"]),
    (["serve"], {"LBAUTH_SIGNING_ALG": "HS256"}, ["LBAUTH_SIGNING_ALG", "ES256"]),
    (["keys", "list"], {"LBAUTH_DATABASE_URL": "mysql://root@localhost/x"}, ["LBAUTH_DATABASE_URL"]),
    (["serve"], {"LBAUTH_USER_TOKEN_TTL": "-5"}, ["LBAUTH_USER_TOKEN_TTL"]),
    (["apps", "list", "--config", "/nonexistent/lbauth.toml"], {}, ["--config", "no such file"]),
    (["serve"], {"LBAUTH_MASTER_KEY": "too-short"}, ["LBAUTH_MASTER_KEY", "32"]),
    (["serve", "--code-ttl", "7200"], {}, ["--code-ttl", "3600"]),
])
def test_the_command_exits_with_one_readable_line(tmp_path, args, env, needles):
    env = {"LBAUTH_DATA_DIR": str(tmp_path), "LBAUTH_BASE_URL": "https://auth.example.test", **env}
    _assert_one_line_error(run_cli(*args, env=env), *needles)


def test_unknown_key_in_config_file_is_refused(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("prot = 8000\n")
    result = run_cli("serve", "--config", str(config), env={"LBAUTH_DATA_DIR": str(tmp_path)})
    _assert_one_line_error(result, "unknown setting 'prot'")


def test_unparseable_config_file_is_refused(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("port = = 1\n")
    _assert_one_line_error(run_cli("serve", "--config", str(config)), "--config", "cannot read")


def test_unreachable_postgresql_is_one_line_not_a_traceback(tmp_path):
    # Port 9 on loopback: nothing listens there.
    result = run_cli("apps", "list", env={"LBAUTH_DATABASE_URL": "postgresql+asyncpg://postgres@127.0.0.1:9/x",
                                          "LBAUTH_DATA_DIR": str(tmp_path)})
    _assert_one_line_error(result, "cannot reach the database", "127.0.0.1:9")


# ---- public URLs and the issuer (contract 1) ------------------------------------------------------------

@pytest.mark.parametrize("issuer, problem", [
    ("HTTPS://auth.example.com", "upper-case scheme"),
    ("https://Auth.Example.com", "upper-case host"),
    ("https://auth.example.com:443", "default port 443"),
    ("http://auth.example.com:80/t", "default port 80"),
    ("https://auth.example.com?x=1", "has a query"),
    ("https://auth.example.com?", "has a query"),
    ("https://auth.example.com#f", "has a fragment"),
    ("https://auth.example.com/", "slash"),
    ("https://auth.example.com/tenant/", "slash"),
    ("https://user@auth.example.com", "user-info"),
    ("auth.example.com", "absolute https URL"),
])
def test_a_non_canonical_issuer_is_refused_in_every_environment(tmp_path, issuer, problem):
    for env in ("development", "production"):
        with pytest.raises(SettingsError) as info:
            settings.load({}, environ={"LBAUTH_ISSUER": issuer, "LBAUTH_ENV": env})
        assert str(info.value).startswith("LBAUTH_ISSUER:") and problem in str(info.value)
    result = run_cli("serve", env={"LBAUTH_DATA_DIR": str(tmp_path), "LBAUTH_ENV": "development",
                                   "LBAUTH_ISSUER": issuer})
    _assert_one_line_error(result, "LBAUTH_ISSUER", problem)
    assert result.returncode == 2


def test_an_issuer_derived_from_a_non_canonical_base_url_is_refused_and_a_canonical_one_kept():
    with pytest.raises(SettingsError) as info:
        settings.load({}, environ={"LBAUTH_BASE_URL": "https://AUTH.example.com"})
    assert str(info.value).startswith("LBAUTH_ISSUER (which defaults to LBAUTH_BASE_URL):")
    for issuer in ("https://auth.example.com", "https://auth.example.com:8443/tenant/a", "http://[::1]:8000"):
        assert settings.load({}, environ={"LBAUTH_ISSUER": issuer}).issuer == issuer  # byte for byte


@pytest.mark.parametrize("env, named", [
    ({}, "LBAUTH_BASE_URL"),  # the default, http://127.0.0.1:8000
    ({"LBAUTH_BASE_URL": "http://auth.example.com"}, "LBAUTH_BASE_URL"),
    ({"LBAUTH_BASE_URL": "https://api.example.com", "LBAUTH_AUTH_URL": "http://login.example.com"},
     "LBAUTH_AUTH_URL"),
    ({"LBAUTH_BASE_URL": "https://api.example.com", "LBAUTH_ISSUER": "http://api.example.com"}, "LBAUTH_ISSUER"),
])
def test_production_refuses_http_public_urls_naming_the_setting(tmp_path, env, named):
    result = run_cli("serve", env={"LBAUTH_DATA_DIR": str(tmp_path), "LBAUTH_PORT": "0", **env})
    _assert_one_line_error(result, named, "https", "production")
    assert result.stderr.startswith(f"lbauth: {named}:")
    assert not (tmp_path / "lbauth.db").exists()  # refused before touching anything


def test_production_serves_with_https_public_urls_on_a_loopback_listener(tmp_path):
    """TLS ends at a proxy in front: the listener is plain HTTP on loopback, the public URLs https."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LBAUTH_")}
    env.update(LBAUTH_DATA_DIR=str(tmp_path), LBAUTH_PORT=str(port), LBAUTH_ENV="production",
               LBAUTH_BASE_URL="https://auth.example.test", LBAUTH_ISSUER="https://auth.example.test/tenant")
    proc = subprocess.Popen([sys.executable, "-m", "lbauth", "serve"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.stderr.read()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/.well-known/oauth-authorization-server/tenant",
                                            timeout=2) as response:
                    meta = json.loads(response.read())
                break
            except OSError:
                assert time.monotonic() < deadline, "the server did not answer"
                time.sleep(0.1)
        assert meta["issuer"] == "https://auth.example.test/tenant"
        assert meta["token_endpoint"] == "https://auth.example.test/oauth/token"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
