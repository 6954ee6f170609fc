"""The `lbauth` command (contract section 2), run as a real child process on both databases."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli


@pytest.fixture
def cli(tmp_path, database_url):
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(tmp_path / "data")}

    def run(*args: str, ok: bool = True):
        result = run_cli(*args, env=env)
        if ok:
            assert result.returncode == 0, result.stderr
        return result

    def run_json(*args: str):
        return json.loads(run(*args, "--json").stdout)

    run.json = run_json
    return run


def test_users_create_and_token(cli):
    user = cli.json("users", "create", "--email", "Ada@Example.com", "--name", "Ada", "--password", "s3cret-pass",
                    "--bio", "math", "--interest-tag", "engines", "--avatar", "https://img.example/ada.png")
    assert set(user) == {"userId", "email", "name"}
    assert user["userId"].startswith("usr_") and user["email"] == "ada@example.com" and user["name"] == "Ada"

    token = cli.json("users", "token", "--email", "ada@example.com", "--password", "s3cret-pass")
    assert set(token) == {"token", "expiresIn"}
    assert token["token"].startswith("lba_ut_") and token["expiresIn"] == 2592000

    wrong = cli("users", "token", "--email", "ada@example.com", "--password", "nope-nope", ok=False)
    assert wrong.returncode == 1 and "wrong" in wrong.stderr and "nope-nope" not in wrong.stderr
    again = cli("users", "create", "--email", "ada@example.com", "--name", "A", "--password", "another-pass", ok=False)
    assert again.returncode == 1 and "already exists" in again.stderr


def test_apps_lifecycle_shows_secrets_once(cli):
    cli("users", "create", "--email", "owner@example.com", "--name", "Owner", "--password", "owner-pass")
    created = cli.json("apps", "create", "--name", "Notes", "--owner", "owner@example.com",
                       "--redirect-uri", "https://notes.example/cb", "--redirect-uri", "http://localhost:3000/cb",
                       "--scope", "userinfo", "--scope", "chat.read", "--webhook-url", "https://notes.example/hook")
    assert set(created) == {"appId", "clientId", "clientSecret", "webhookSecret", "redirectUris", "scopes",
                            "webhookUrl"}
    assert created["appId"].startswith("app_")
    assert created["clientSecret"].startswith("lba_cs_") and len(created["clientSecret"]) >= 7 + 43
    assert created["redirectUris"] == ["https://notes.example/cb", "http://localhost:3000/cb"]
    assert created["scopes"] == ["userinfo", "chat.read"]
    assert created["webhookUrl"] == "https://notes.example/hook"
    client_id = created["clientId"]

    listing = cli("apps", "list", "--json").stdout
    shown = cli("apps", "show", client_id, "--json").stdout
    for text in (listing, shown, cli("apps", "show", client_id).stdout):
        assert created["clientSecret"] not in text and created["webhookSecret"] not in text
    assert json.loads(shown)["clientId"] == client_id
    assert [a["clientId"] for a in json.loads(listing)] == [client_id]

    updated = cli.json("apps", "update", client_id, "--name", "Notes 2", "--redirect-uri", "https://n2.example/cb",
                       "--webhook-url", "")
    assert updated["name"] == "Notes 2" and updated["redirectUris"] == ["https://n2.example/cb"]
    assert updated["webhookUrl"] is None and updated["scopes"] == ["userinfo", "chat.read"]

    rotated = cli.json("apps", "rotate-secret", client_id)
    assert set(rotated) == {"clientId", "clientSecret"} and rotated["clientSecret"] != created["clientSecret"]
    rotated_hook = cli.json("apps", "rotate-webhook-secret", client_id)
    assert set(rotated_hook) == {"clientId", "webhookSecret"}
    assert rotated_hook["webhookSecret"] != created["webhookSecret"]


def test_app_without_scopes_may_request_every_scope(cli):
    cli("users", "create", "--email", "o@example.com", "--name", "O", "--password", "owner-pass")
    created = cli.json("apps", "create", "--name", "All", "--owner", "o@example.com",
                       "--redirect-uri", "https://all.example/cb")
    assert created["scopes"] == ["userinfo", "memory.read", "chat.read", "chat.write", "note.write", "voice",
                                 "plaza.read", "plaza.write", "agent_memory"]
    assert created["webhookUrl"] is None


@pytest.mark.parametrize("args, needle", [
    (["--owner", "nobody@example.com", "--redirect-uri", "https://x.example/cb"], "owner"),
    (["--owner", "o@example.com", "--redirect-uri", "http://x.example/cb"], "https"),
    (["--owner", "o@example.com", "--redirect-uri", "https://x.example/cb#frag"], "fragment"),
    (["--owner", "o@example.com", "--redirect-uri", "https://x.example/cb", "--scope", "admin"], "scope"),
    (["--owner", "o@example.com", "--redirect-uri", "https://x.example/cb", "--webhook-url", "http://h.example/"],
     "https"),
    (["--owner", "o@example.com", "--redirect-uri", "https://x.example/cb", "--webhook-url", "https://10.0.0.5/"],
     "private"),
])
def test_apps_create_refuses_bad_input_in_one_line(cli, args, needle):
    cli("users", "create", "--email", "o@example.com", "--name", "O", "--password", "owner-pass")
    result = cli("apps", "create", "--name", "Bad", *args, ok=False)
    assert result.returncode == 1 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and needle in result.stderr.lower(), result.stderr


def test_unknown_app_is_reported(cli):
    result = cli("apps", "show", "cid_doesnotexist", ok=False)
    assert result.returncode == 1 and "does not exist" in result.stderr


def test_text_output_is_readable(cli):
    out = cli("users", "create", "--email", "t@example.com", "--name", "Tee", "--password", "tee-password").stdout
    lines = dict(line.split(None, 1) for line in out.strip().splitlines())
    assert lines["email"] == "t@example.com" and lines["name"] == "Tee" and lines["userId"].startswith("usr_")
