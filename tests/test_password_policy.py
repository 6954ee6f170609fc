"""One password policy wherever a password is set (NIST SP 800-63B-4), against the real server and
the real `lbauth` command on both databases: 10 to 256 characters, no composition rules, not holding
the email or the name, not in the offline list of breached passwords. Each refusal is
`account.password.weak` (400) or a one-line error and exit status 1, saying why without repeating
the password."""

from __future__ import annotations

import json
import secrets

import pytest

from tests.account_helpers import change_password, login_status
from tests.conftest import run_cli

BREACHED = ("password1234", "qwertyuiop")
NAME = "Grace Hopper"


@pytest.fixture
async def grace(server):
    """A user named Grace Hopper, with her user token."""
    user = await server.create_user(email="grace.hopper@example.com", name=NAME)
    return {**user, "token": await server.login(user["email"], user["password"])}


async def refused_change(server, grace, new: str, reason: str) -> None:
    refused = await change_password(server, grace["token"], grace["password"], new)
    refused.assert_error(400, "account.password.weak")
    assert reason in refused.json["message"], refused.json
    assert new not in refused.text
    (await login_status(server, grace["email"], new)).assert_error(401, "auth.login.failed")


async def accepted_change(server, grace, new: str) -> None:
    changed = await change_password(server, grace["token"], grace["password"], new)
    assert changed.status == 200, changed.text
    assert (await login_status(server, grace["email"], new)).status == 200
    grace["password"] = new


@pytest.mark.parametrize("breached", BREACHED)
async def test_the_api_refuses_a_breached_password(server, grace, breached):
    await refused_change(server, grace, breached, "exposed in data breaches")


async def test_the_api_refuses_a_password_holding_the_email_or_the_name(server, grace):
    for new in ("GRACE.HOPPER@example.com", "my name is grace.hopper", "hopper-1906-navy"):
        await refused_change(server, grace, new, "contains your email address")  # grace, hopper: the email too
    renamed = await server.client.request("PATCH", "/api/account/profile", json_body={"name": "Amazing Admiral"},
                                          bearer=grace["token"])
    assert renamed.status == 200, renamed.text
    for new in ("an amazing day at sea", "AmazingAdmiral!!", "admiral of the fleet"):
        await refused_change(server, grace, new, "contains your name")
    await accepted_change(server, grace, "ships in the harbour")


async def test_the_api_takes_10_to_256_characters(server, grace):
    await refused_change(server, grace, "k7#pQ2vX9", "at least 10 characters")
    await refused_change(server, grace, "k" * 257, "at most 256 characters")
    await accepted_change(server, grace, secrets.token_urlsafe(8)[:10])
    await accepted_change(server, grace, "k7#pQ2vX9m")
    await accepted_change(server, grace, secrets.token_urlsafe(192))  # 256 characters


# ---- lbauth users create ---------------------------------------------------------------------------------


def env_of(tmp_path, database_url) -> dict[str, str]:
    return {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(tmp_path / "data")}


def test_users_create_refuses_a_weak_password_on_one_line(cli):
    """The rules themselves are checked through the API above; here, what the command does with a
    refusal (each call is a process of its own: a few cover it)."""
    for password, reason in ((BREACHED[0], "exposed in data breaches"),
                             ("i sail with the admiral", "contains your name"),
                             ("k" * 257, "at most 256 characters")):
        refused = cli("users", "create", "--email", "grace.hopper@example.com", "--name", "Admiral Grace",
                      "--password", password, ok=False)
        assert refused.returncode == 1 and refused.stdout == "", refused
        assert refused.stderr.count("\n") == 1 and reason in refused.stderr, refused.stderr
        assert password not in refused.stderr
    assert cli.json("users", "list") == []


def test_users_create_reads_the_password_from_standard_input_and_holds_it_to_the_policy(tmp_path, database_url):
    env = env_of(tmp_path, database_url)
    args = ("users", "create", "--email", "grace@example.com", "--name", "Grace", "--json")
    for weak, reason in (("qwertyuiop\n", "exposed in data breaches"),):
        refused = run_cli(*args, env=env, input=weak)
        assert refused.returncode == 1 and reason in refused.stderr and refused.stderr.count("\n") == 1, refused
    password = secrets.token_urlsafe(8)[:10]
    created = run_cli(*args, env=env, input=password + "\n")
    assert created.returncode == 0, created.stderr
    assert password not in created.stdout + created.stderr
    token = run_cli("users", "token", "--email", "grace@example.com", f"--password={password}", "--json", env=env)
    assert token.returncode == 0 and json.loads(token.stdout)["token"].startswith("lba_ut_"), token.stderr
