"""The `lbauth` command (contract section 2), run as a real child process on both databases."""

from __future__ import annotations

import json
import socket

import pytest

from lbauth.core.crypto.masterkey import MasterKeys, key_file
from tests.conftest import run_cli, start_server
from tests.processes import ServerProcess


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
    cli("users", "create", "--email", "owner@example.com", "--name", "Owner", "--password", "quiet-harbour")
    created = cli.json("apps", "create", "--name", "Notes", "--owner", "owner@example.com",
                       "--redirect-uri", "https://notes.example/cb", "--redirect-uri", "http://localhost:3000/cb",
                       "--scope", "userinfo", "--scope", "chat.read", "--webhook-url", "https://notes.example/hook")
    assert set(created) == {"appId", "clientId", "clientSecret", "webhookSecret", "redirectUris", "scopes",
                            "webhookUrl"}  # contract 2, exactly; the OpenID settings show in `apps show`
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
    cli("users", "create", "--email", "o@example.com", "--name", "O", "--password", "quiet-harbour")
    created = cli.json("apps", "create", "--name", "All", "--owner", "o@example.com",
                       "--redirect-uri", "https://all.example/cb")
    assert created["scopes"] == ["openid", "profile", "email", "userinfo", "memory.read", "chat.read", "chat.write",
                                 "note.write", "voice", "plaza.read", "plaza.write", "agent_memory"]
    assert created["webhookUrl"] is None


def test_an_app_made_before_the_first_start_leaves_the_access_key_to_the_signing_alg(cli):
    """The CLI makes the ID-token key an app asks for; on a database no server has started on,
    the access-token key (LBAUTH_SIGNING_ALG, ES256 by default) is made too, and first."""
    cli("users", "create", "--email", "f@example.com", "--name", "F", "--password", "quiet-harbour")
    cli("apps", "create", "--name", "First", "--owner", "f@example.com", "--redirect-uri", "https://f.example/cb")
    listed = cli.json("keys", "list")
    assert sorted((k["alg"], k["state"]) for k in listed) == [("ES256", "active"), ("RS256", "active")]


def test_openid_options_of_users_and_apps(cli):
    """Contract 15: --email-verified, --id-token-alg (its key made when an app asks for it),
    --post-logout-redirect-uri (checked like redirect URIs)."""
    cli("users", "create", "--email", "v@example.com", "--name", "V", "--password", "quiet-harbour", "--email-verified")
    created = cli.json("apps", "create", "--name", "Oidc", "--owner", "v@example.com",
                       "--redirect-uri", "https://rp.example/cb", "--id-token-alg", "ES256",
                       "--post-logout-redirect-uri", "https://rp.example/bye",
                       "--post-logout-redirect-uri", "https://rp.example/bye")
    assert {(k["alg"], k["state"]) for k in cli.json("keys", "list")} >= {("ES256", "active")}
    client_id = created["clientId"]
    shown = cli.json("apps", "show", client_id)
    assert shown["idTokenAlg"] == "ES256" and shown["postLogoutRedirectUris"] == ["https://rp.example/bye"]
    updated = cli.json("apps", "update", client_id, "--id-token-alg", "EdDSA",
                       "--post-logout-redirect-uri", "https://rp.example/a", "--post-logout-redirect-uri",
                       "https://rp.example/b")
    assert updated["idTokenAlg"] == "EdDSA"
    assert updated["postLogoutRedirectUris"] == ["https://rp.example/a", "https://rp.example/b"]
    assert ("EdDSA", "active") in {(k["alg"], k["state"]) for k in cli.json("keys", "list")}
    assert cli.json("apps", "update", client_id, "--name", "Renamed")["idTokenAlg"] == "EdDSA"  # kept
    renamed = cli.json("apps", "show", client_id)  # read back apart from the update's own answer
    assert (renamed["name"], renamed["idTokenAlg"]) == ("Renamed", "EdDSA")
    assert renamed["postLogoutRedirectUris"] == ["https://rp.example/a", "https://rp.example/b"]
    keys_before = cli.json("keys", "list")
    bad_alg = cli("apps", "update", client_id, "--id-token-alg", "HS256", ok=False)
    assert bad_alg.returncode != 0 and "HS256" in bad_alg.stderr and bad_alg.stdout == ""
    assert "Traceback" not in bad_alg.stderr, bad_alg.stderr  # refused, not crashed
    bad_uri = cli("apps", "update", client_id, "--post-logout-redirect-uri", "https://rp.example/x#f", ok=False)
    assert bad_uri.returncode == 1 and "fragment" in bad_uri.stderr.lower() and bad_uri.stdout == ""
    assert len(bad_uri.stderr.strip().splitlines()) == 1, bad_uri.stderr  # one line, no traceback
    # Refused means nothing changed: the app as it was, no key made for the refused algorithm.
    assert cli.json("apps", "show", client_id) == renamed
    assert cli.json("keys", "list") == keys_before


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
    cli("users", "create", "--email", "o@example.com", "--name", "O", "--password", "quiet-harbour")
    result = cli("apps", "create", "--name", "Bad", *args, ok=False)
    assert result.returncode == 1 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and needle in result.stderr.lower(), result.stderr


def test_unknown_app_is_reported(cli):
    result = cli("apps", "show", "cid_doesnotexist", ok=False)
    assert result.returncode == 1 and "does not exist" in result.stderr


def test_text_output_is_readable(cli):
    out = cli("users", "create", "--email", "t@example.com", "--name", "Tee", "--password", "pass-for-t-1").stdout
    lines = dict(line.split(None, 1) for line in out.strip().splitlines())
    assert lines["email"] == "t@example.com" and lines["name"] == "Tee" and lines["userId"].startswith("usr_")


# ---- master keys (contract 8) -----------------------------------------------------------------------------

def test_keys_new_master_key_prints_one_key_on_its_own_line(tmp_path):
    env = {"LBAUTH_DATA_DIR": str(tmp_path / "data")}
    first, second = run_cli("keys", "new-master-key", env=env), run_cli("keys", "new-master-key", env=env)
    assert first.returncode == second.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert len(lines) == 1 and first.stdout == lines[0] + "\n"
    keys = MasterKeys.parse(lines[0], "printed key")  # usable as LBAUTH_MASTER_KEY as it is
    assert len(keys.ids) == 1 and first.stdout != second.stdout
    as_json = json.loads(run_cli("keys", "new-master-key", "--json", env=env).stdout)
    assert set(as_json) == {"keyId", "key"}
    assert MasterKeys.parse(as_json["key"], "json").primary_id == as_json["keyId"]
    assert not (tmp_path / "data").exists()  # it writes nothing anywhere


def _serve_refusal(env: dict[str, str]):
    result = run_cli("serve", env={"LBAUTH_ENV": "development", "LBAUTH_PORT": "0", **env}, timeout=60)
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stderr.strip().splitlines()[-1]


async def test_serve_refuses_a_database_sealed_under_a_master_key_it_lacks(tmp_path, database_url):
    """A second server with its own data dir on the deployment's database (contract 8): it exits
    with status 1, names the key id it needs and the remedy, and generates no key of its own."""
    first = await start_server(tmp_path, database_url)
    await first.create_app((await first.create_user())["email"])  # a webhook secret sealed too
    first.client.close()
    await first.running.stop()
    needed = MasterKeys.parse(key_file(first.settings).read_text(), "key file").primary_id
    remedy = "set LBAUTH_MASTER_KEY to the same list on every server of the deployment"

    second = tmp_path / "second"
    line = _serve_refusal({"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(second)})
    assert line.startswith("lbauth: ") and needed in line and remedy in line, line
    assert not (second / "master.key").exists()  # a key of its own could open nothing here

    other = run_cli("keys", "new-master-key", env={}).stdout.strip()
    other_id = MasterKeys.parse(other, "other").primary_id
    line = _serve_refusal({"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(second),
                           "LBAUTH_MASTER_KEY": other})
    assert needed in line and other_id in line and remedy in line, line
    # The commands that seal refuse alike, rather than seal under a key the servers lack.
    created = run_cli("apps", "create", "--name", "X", "--owner", "nobody@example.com", "--redirect-uri",
                      "https://x.example/cb", env={"LBAUTH_DATABASE_URL": database_url,
                                                   "LBAUTH_DATA_DIR": str(second), "LBAUTH_MASTER_KEY": other})
    assert created.returncode == 1 and needed in created.stderr and created.stdout == ""

    # With the deployment's key listed, it starts.
    both = f"{other},{key_file(first.settings).read_text().strip()}"
    second.mkdir()
    server = await ServerProcess(database_url, second, master_key=both).start()
    server.stop()


def test_version():
    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == "lbauth 0.1.0", result


def test_demo_refuses_to_run_in_production(tmp_path, database_url):
    """The demo user's password is printed and published: never on a production server."""
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(tmp_path / "data"), "LBAUTH_ENV": "production"}
    result = run_cli("demo", env=env)
    assert result.returncode == 1 and result.stdout == ""
    assert "development only" in result.stderr and "LBAUTH_ENV=development" in result.stderr
    users = run_cli("users", "list", "--json", env=env)
    assert users.returncode == 0 and json.loads(users.stdout) == [], users  # nothing was created


def test_a_port_in_use_is_named_with_the_setting_that_moves_it(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("serve", env={"LBAUTH_DATA_DIR": str(tmp_path / "data"), "LBAUTH_ENV": "development",
                                       "LBAUTH_PORT": str(port), "LBAUTH_HOST": "127.0.0.1"}, timeout=60)
    assert result.returncode == 1
    assert f"127.0.0.1:{port} is already in use" in result.stderr and "LBAUTH_PORT" in result.stderr, result.stderr


def test_users_create_reads_the_password_from_standard_input(tmp_path, database_url):
    """`--password` shows in `ps`: without it the password is the first line of standard input."""
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(tmp_path / "data")}
    created = run_cli("users", "create", "--email", "grace@example.com", "--name", "Grace", "--json", env=env,
                      input="piped-password-1\n")
    assert created.returncode == 0, created.stderr
    assert "piped-password-1" not in created.stdout + created.stderr
    token = run_cli("users", "token", "--email", "grace@example.com", "--password", "piped-password-1", "--json",
                    env=env)
    assert token.returncode == 0 and json.loads(token.stdout)["token"].startswith("lba_ut_"), token.stderr
    nothing = run_cli("users", "create", "--email", "x@example.com", "--name", "X", env=env, input="")
    assert nothing.returncode == 1 and "standard input" in nothing.stderr


@pytest.mark.parametrize(("password", "reason"), [
    ("ninechars", "at least 10 characters"), ("p" * 257, "at most 256 characters"),
    ("Ada@Example.com", "contains your email address")])
def test_users_create_holds_passwords_to_the_same_policy_as_the_pages(cli, password, reason):
    """The CLI accepted 8 characters where a user changing their password needed 10: one policy."""
    refused = cli("users", "create", "--email", "ada@example.com", "--name", "Ada", "--password", password, ok=False)
    assert refused.returncode == 1 and reason in refused.stderr, refused.stderr
    assert cli.json("users", "list") == []
    cli("users", "create", "--email", "ada@example.com", "--name", "Ada", "--password", "tenchars10")


def test_help_shows_the_commands_own_options_before_the_settings():
    """`serve --help` began with 22 settings flags (50 lines): the command's own come first now."""
    result = run_cli("apps", "create", "--help")
    assert result.returncode == 0
    usage, *rest = result.stdout.splitlines()
    assert usage.startswith("usage: lbauth apps create") and usage.endswith("[--json] [SETTINGS]")
    assert "--database-url" not in usage
    text = result.stdout
    assert text.index("--name NAME") < text.index("--redirect-uri URI") < text.index("settings (")
    assert text.index("settings (") < text.index("--database-url VALUE")
