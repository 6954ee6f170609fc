"""The operators' account commands (contract sections 2 and 16): `lbauth users list`, `disable`,
`enable` and `delete`, run as a real child process on both databases, as an operator would."""

from __future__ import annotations

import re

LISTED_FIELDS = {"userId", "email", "name", "disabled", "createdAt"}
CHANGED_FIELDS = {"userId", "email", "status"}


def create(cli, email: str, name: str, password: str = "long enough password") -> dict:
    return cli.json("users", "create", "--email", email, "--name", name, "--password", password)


def signs_in(cli, email: str, password: str = "long enough password") -> bool:
    return cli("users", "token", "--email", email, "--password", password, ok=False).returncode == 0


def test_users_list_shows_each_account_with_exactly_its_fields(cli):
    assert cli.json("users", "list") == []
    ada = create(cli, "Ada@Example.com", "Ada Lovelace")
    grace = create(cli, "grace@example.com", "Grace Hopper")
    listed = cli.json("users", "list")
    assert [set(item) for item in listed] == [LISTED_FIELDS, LISTED_FIELDS]
    by_id = {item["userId"]: item for item in listed}
    assert by_id[ada["userId"]]["email"] == "ada@example.com" and by_id[ada["userId"]]["name"] == "Ada Lovelace"
    assert by_id[grace["userId"]]["name"] == "Grace Hopper"
    for item in listed:
        assert item["disabled"] is False
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", item["createdAt"]), item


def test_disable_then_enable_answers_the_status_and_the_list_follows(cli):
    user = create(cli, "dora@example.com", "Dora")
    disabled = cli.json("users", "disable", "DORA@example.com")
    assert disabled == {"userId": user["userId"], "email": "dora@example.com", "status": "disabled"}
    assert set(disabled) == CHANGED_FIELDS
    (listed,) = cli.json("users", "list")
    assert listed["disabled"] is True
    assert not signs_in(cli, "dora@example.com")

    enabled = cli.json("users", "enable", "dora@example.com")
    assert enabled == {"userId": user["userId"], "email": "dora@example.com", "status": "enabled"}
    (listed,) = cli.json("users", "list")
    assert listed["disabled"] is False
    assert signs_in(cli, "dora@example.com")


def test_delete_removes_the_account_from_the_list_and_frees_the_email(cli):
    gone = create(cli, "gone@example.com", "Gone Soon")
    stays = create(cli, "stays@example.com", "Stays")
    deleted = cli.json("users", "delete", "gone@example.com")
    assert deleted == {"userId": gone["userId"], "email": "gone@example.com", "status": "deleted"}
    assert [item["userId"] for item in cli.json("users", "list")] == [stays["userId"]]
    assert not signs_in(cli, "gone@example.com")
    # Deleted is gone for the operator too: the email names no account any more.
    result = cli("users", "disable", "gone@example.com", ok=False)
    assert result.returncode == 1 and result.stdout == ""
    again = create(cli, "gone@example.com", "Someone Else")
    assert again["userId"] != gone["userId"]


def test_an_unknown_email_is_an_error_in_one_line(cli):
    create(cli, "known@example.com", "Known")
    for command, as_json in (("disable", ()), ("enable", ("--json",)), ("delete", ("--json",))):
        result = cli("users", command, "nobody@example.com", *as_json, ok=False)
        assert result.returncode == 1 and result.stdout == "", (command, result.stdout)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "no user" in result.stderr.lower(), result.stderr
    (listed,) = cli.json("users", "list")
    assert listed["email"] == "known@example.com" and listed["disabled"] is False


def test_plain_output_is_readable(cli):
    assert cli("users", "list").stdout.strip() == "(none)"
    ada = create(cli, "ada@example.com", "Ada Lovelace")
    create(cli, "bob@example.com", "Bob")
    records = [dict(line.split(None, 1) for line in block.splitlines())
               for block in cli("users", "list").stdout.strip().split("\n\n")]
    assert [r["email"] for r in records] == ["ada@example.com", "bob@example.com"]
    assert records[0] == {"userId": ada["userId"], "email": "ada@example.com", "name": "Ada Lovelace",
                          "disabled": "no", "createdAt": records[0]["createdAt"]}
    out = cli("users", "disable", "ada@example.com").stdout
    assert dict(line.split(None, 1) for line in out.strip().splitlines()) == {
        "userId": ada["userId"], "email": "ada@example.com", "status": "disabled"}
    records = [dict(line.split(None, 1) for line in block.splitlines())
               for block in cli("users", "list").stdout.strip().split("\n\n")]
    assert records[0]["disabled"] == "yes"
    for command, status in (("enable", "enabled"), ("delete", "deleted")):
        out = cli("users", command, "ada@example.com").stdout
        assert f"status  {status}" in out.splitlines()
