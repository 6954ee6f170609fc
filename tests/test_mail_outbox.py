"""The mail outbox and the mailer (contract 18) against a real SMTP server on loopback
(tests/mailbox.py): what a message holds, retries while the SMTP server is down, once-only
delivery across a restart and a SIGKILL, the CLI, `.eml` files in development, and `serve`'s
warning in production without SMTP."""

from __future__ import annotations

import json
import logging

import pytest

from lbauth.core.mail import outbox
from lbauth.core.mail.outbox import Letter, MailRequest
from lbauth.mailer import DEVELOPMENT_LINK
from lbauth.storage.db import open_database
from lbauth.storage.repo import mail as repo
from tests.conftest import arun_cli, running_server
from tests.mailbox import Mailbox, html_of, link_in, self_signed, text_of
from tests.processes import ServerProcess
from tests.support import wait_until

SCHEDULE = "10,20"


def smtp_server(tmp_path, database_url, url: str, **overrides):
    """A production server sending through the SMTP server at `url`."""
    environ = {"LBAUTH_SMTP_URL": url, **overrides.pop("environ", {})}
    return running_server(tmp_path, database_url, environ=environ, mail_retry_schedule=SCHEDULE, **overrides)


async def queue_test(srv, to: str) -> str:
    return await outbox.send_test(srv.db, srv.clock, srv.services.master_keys, to)


async def message(srv, message_id: str):
    return await srv.db.read(repo.by_id, message_id)


async def test_a_test_message_arrives_with_a_text_and_an_html_part(tmp_path, database_url, mailbox):
    async with smtp_server(tmp_path, database_url, mailbox.url) as srv:
        env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(srv.settings.data_dir)}
        queued = await arun_cli("mail", "test", "--to", "ops@example.com", "--json", env=env)
        assert queued.returncode == 0, queued.stderr
        message_id = json.loads(queued.stdout)["messageId"]
        assert message_id.startswith("msg_")

        received = await mailbox.next(to="ops@example.com")
        assert received["To"] == "ops@example.com"
        assert received["From"] == srv.settings.mail_from == "noreply@127.0.0.1"
        assert received["Message-ID"] == f"<{message_id}@127.0.0.1>"
        assert received["Date"]
        assert "Test message from" in received["Subject"]
        assert received.get_content_type() == "multipart/alternative"
        assert srv.settings.auth_url in text_of(received)
        assert "<p>" in html_of(received)

        await wait_until(lambda: _status(srv, message_id, "sent"), 5, "the message recorded sent")
        listed = await arun_cli("mail", "list", "--status", "sent", "--json", env=env)
        [row] = json.loads(listed.stdout)
        assert row == {"messageId": message_id, "kind": "test", "recipient": "ops@example.com", "status": "sent",
                       "attempts": 1, "lastError": None, "nextAttemptAt": None, "createdAt": row["createdAt"],
                       "sentAt": row["sentAt"]}
        assert row["sentAt"].endswith("Z") and row["createdAt"].endswith("Z")
        assert len(mailbox.messages) == 1


async def _status(srv, message_id: str, status: str) -> bool:
    found = await message(srv, message_id)
    return found is not None and found.status == status


async def test_smtp_down_keeps_messages_and_each_is_sent_once_when_it_is_back(tmp_path, database_url, mailbox):
    async with smtp_server(tmp_path, database_url, mailbox.url) as srv:
        await mailbox.stop()
        ids = [await queue_test(srv, f"user{i}@example.com") for i in range(3)]
        await srv.running.mailer.flush()
        for message_id in ids:
            found = await message(srv, message_id)
            assert (found.status, found.attempts) == ("pending", 1)
            assert "ConnectionError" in found.last_error or "Connect" in found.last_error, found.last_error
            assert found.next_attempt_at > srv.clock.now()

        await mailbox.start()  # the same port
        await srv.running.mailer.flush()
        assert mailbox.messages == []  # not due yet: the retry waits its delay
        srv.clock.advance(12)  # past 10 s + 10% jitter
        for i in range(3):
            await mailbox.next(to=f"user{i}@example.com")
        await wait_until(lambda: all_sent(srv, ids), 5, "every message recorded sent")
        srv.clock.advance(3600)
        await srv.running.mailer.flush()
        assert sorted(m["Message-ID"] for m in mailbox.messages) == sorted(f"<{i}@127.0.0.1>" for i in ids)


async def all_sent(srv, ids: list[str]) -> bool:
    return all([(await message(srv, i)).status == "sent" for i in ids])


async def test_a_refused_recipient_fails_at_once_a_busy_one_is_retried_and_redeliver_sends(
        tmp_path, database_url, mailbox):
    mailbox.refuse["gone@example.com"] = "550 5.1.1 No such user"
    mailbox.refuse["busy@example.com"] = "451 4.3.0 Try again later"
    async with smtp_server(tmp_path, database_url, mailbox.url) as srv:
        gone, busy = await queue_test(srv, "gone@example.com"), await queue_test(srv, "busy@example.com")
        await srv.running.mailer.flush()
        failed, pending = await message(srv, gone), await message(srv, busy)
        assert (failed.status, failed.next_attempt_at) == ("failed", None)
        assert "550" in failed.last_error and "No such user" in failed.last_error
        assert pending.status == "pending" and "451" in pending.last_error

        srv.clock.advance(12)
        await srv.running.mailer.flush()
        srv.clock.advance(25)
        await srv.running.mailer.flush()  # the schedule (10, 20) is spent
        assert (await message(srv, busy)).status == "failed"

        del mailbox.refuse["gone@example.com"]
        env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(srv.settings.data_dir)}
        listed = json.loads((await arun_cli("mail", "list", "--status", "failed", "--json", env=env)).stdout)
        assert {row["messageId"] for row in listed} == {gone, busy}
        again = await arun_cli("mail", "redeliver", gone, "--json", env=env)
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["status"] == "pending"
        received = await mailbox.next(to="gone@example.com")
        assert received["Message-ID"] == f"<{gone}@127.0.0.1>"
        await wait_until(lambda: _status(srv, gone, "sent"), 5, "the redelivered message recorded sent")

        unknown = await arun_cli("mail", "redeliver", "msg_unknown", env=env)
        assert unknown.returncode != 0 and "No such mail message" in unknown.stderr and not unknown.stdout


async def test_the_composed_letter_is_kept_so_a_retry_sends_the_same_one(tmp_path, database_url, mailbox):
    composed: list[str] = []

    async def compose(request: MailRequest) -> Letter:
        composed.append(request.id)
        link = f"https://auth.example/password/reset?token=lba_pr_{len(composed)}abcdefgh"
        return Letter(subject=f"Reset for {request.params['name']}", text=f"Follow {link}\n",
                      html=f'<a href="{link}">reset</a>', link=link)

    async with smtp_server(tmp_path, database_url, mailbox.url) as srv:
        srv.services.mail_composers["reset"] = compose
        await mailbox.stop()
        message_id = await srv.db.transaction(lambda conn: outbox.queue(
            conn, srv.services.master_keys, kind="reset", recipient="r@example.com", params={"name": "Rita"},
            now=int(srv.clock.now())))
        await srv.running.mailer.flush()
        stored = await message(srv, message_id)
        assert stored.letter_sealed and "lba_pr_" not in stored.letter_sealed and "Rita" not in stored.params_sealed
        assert "lba_pr_" not in (stored.last_error or "")
        await mailbox.start()
        srv.clock.advance(12)
        received = await mailbox.next(to="r@example.com")
        assert composed == [message_id]  # composed once, before the first attempt
        assert link_in(received, "lba_pr_") == "https://auth.example/password/reset?token=lba_pr_1abcdefgh"
        assert received["Subject"] == "Reset for Rita"

        dropped = await srv.db.transaction(lambda conn: outbox.queue(
            conn, srv.services.master_keys, kind="nothing", recipient="n@example.com", params={},
            now=int(srv.clock.now())))
        unknown = await srv.db.transaction(lambda conn: outbox.queue(
            conn, srv.services.master_keys, kind="nobody-knows", recipient="n@example.com", params={},
            now=int(srv.clock.now())))

        async def nothing(request: MailRequest) -> None:
            return None
        srv.services.mail_composers["nothing"] = nothing
        await srv.running.mailer.flush()
        assert (await message(srv, dropped)).status == "dropped"
        failed = await message(srv, unknown)
        assert failed.status == "failed" and "nobody-knows" in failed.last_error


async def test_starttls_is_used_when_offered_and_the_password_comes_from_its_file(
        tmp_path, database_url, monkeypatch):
    context, cert = self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the test's certificate authority, for this process
    password_file = tmp_path / "smtp-password"
    password_file.write_text("s3cret-smtp-pass\n")
    box = await Mailbox.start(port=0, tls=context, credentials=("mailer", "s3cret-smtp-pass"))
    try:
        url = f"smtp://mailer@127.0.0.1:{box.port}"
        async with smtp_server(tmp_path, database_url, url,
                               environ={"LBAUTH_SMTP_PASSWORD_FILE": str(password_file)}) as srv:
            message_id = await queue_test(srv, "tls@example.com")
            await box.next(to="tls@example.com")
            [received] = box.received
            assert received.tls and received.login == "mailer"
            await wait_until(lambda: _status(srv, message_id, "sent"), 5, "the message recorded sent")

    finally:
        await box.stop()


async def test_development_without_smtp_writes_eml_files_and_logs_the_link(tmp_path, database_url, caplog):
    caplog.set_level(logging.INFO, "lbauth.mail")
    async with running_server(tmp_path, database_url, env="development") as srv:
        link = "http://127.0.0.1/signup/confirm?token=lba_su_abcdefghijklmnop"

        async def compose(request: MailRequest) -> Letter:
            return Letter(subject="Confirm", text=f"Follow {link}\n", html=f'<a href="{link}">confirm</a>', link=link)
        srv.services.mail_composers["signup"] = compose
        plain = await queue_test(srv, "dev@example.com")
        linked = await srv.db.transaction(lambda conn: outbox.queue(
            conn, srv.services.master_keys, kind="signup", recipient="new@example.com", params={},
            now=int(srv.clock.now())))
        await srv.running.mailer.flush()

        folder = srv.settings.data_dir / "mail"
        files = {path.name.split("-", 1)[1].removesuffix(".eml"): path for path in folder.glob("*.eml")}
        assert set(files) == {plain, linked}
        assert all(path.stat().st_mode & 0o077 == 0 for path in files.values())
        import email
        import email.policy
        written = email.message_from_bytes(files[linked].read_bytes(), policy=email.policy.default)
        assert link_in(written, "lba_su_") == link and written["To"] == "new@example.com"

        records = [r for r in caplog.records if r.name == "lbauth.mail" and getattr(r, "fields", {}).get("file")]
        by_file = {r.fields["file"]: r for r in records}
        assert by_file[str(files[linked])].msg == DEVELOPMENT_LINK
        assert by_file[str(files[linked])].fields["link"] == link
        assert "link" not in by_file[str(files[plain])].fields
        assert (await message(srv, linked)).status == "sent"


async def test_production_without_smtp_has_no_mailer_and_says_so_at_start(tmp_path, database_url, caplog):
    caplog.set_level(logging.WARNING, "lbauth.server")
    async with running_server(tmp_path, database_url) as srv:
        assert srv.running.mailer is None
    [warning] = [r for r in caplog.records if "mail is off" in r.getMessage()]
    assert warning.levelno == logging.WARNING
    assert "sign-up and password reset are off" in warning.getMessage()
    assert "LBAUTH_SMTP_URL" in warning.getMessage()


async def test_cli_mail_list_checks_its_status_and_test_checks_the_address(cli):
    assert cli.json("mail", "list") == []
    bad = cli("mail", "test", "--to", "not an address", ok=False)
    assert bad.returncode == 1 and "recipient" in bad.stderr
    queued = cli.json("mail", "test", "--to", "a@example.com")
    [row] = cli.json("mail", "list", "--status", "pending")
    assert row["messageId"] == queued["messageId"] and row["attempts"] == 0 and row["nextAttemptAt"].endswith("Z")
    assert "a@example.com" in cli("mail", "list").stdout


@pytest.mark.slow
async def test_a_message_queued_before_a_sigkill_is_sent_once_after_the_restart(tmp_path, database_url, mailbox):
    """The SMTP server is down when the message is first tried; the server process is killed with
    SIGKILL while the message waits for its retry; a new process sends it, once."""
    data_dir = tmp_path / "data"
    data_dir.mkdir(exist_ok=True)  # it holds the master key already
    await mailbox.stop()
    settings = {"smtp_url": mailbox.url, "mail_retry_schedule": ",".join(["3"] * 20)}
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(data_dir)}
    first = await ServerProcess(database_url, data_dir, **settings).start()
    db = open_database(database_url)
    try:
        queued = await arun_cli("mail", "test", "--to", "crash@example.com", "--json", env=env)
        message_id = json.loads(queued.stdout)["messageId"]

        async def tried() -> bool:
            found = await db.read(repo.by_id, message_id)
            return found.attempts >= 1
        await wait_until(tried, 10, "a first attempt, refused")
        first.kill()
        assert (await db.read(repo.by_id, message_id)).status == "pending"

        await mailbox.start()
        second = await ServerProcess(database_url, data_dir, **settings).start()
        try:
            received = await mailbox.next(to="crash@example.com", timeout=15)
            assert received["Message-ID"] == f"<{message_id}@127.0.0.1>"

            async def sent() -> bool:
                return (await db.read(repo.by_id, message_id)).status == "sent"
            await wait_until(sent, 5, "the message recorded sent")
        finally:
            second.stop()
        assert len(mailbox.messages) == 1
    finally:
        first.stop()
        await db.close()


async def test_settled_mail_is_deleted_after_30_days_and_pending_mail_never(tmp_path, database_url, mailbox):
    """A message's address and words are kept as long as an operator may need them, no longer."""
    async with running_server(tmp_path, database_url, smtp_url=mailbox.url) as srv:
        sent = (await srv.services.db.transaction(
            lambda conn: outbox.queue(conn, srv.services.master_keys, kind="test", recipient="old@example.com",
                                      params={}, now=int(srv.clock.now()))))
        await srv.running.mailer.flush()
        await mailbox.next(to="old@example.com")
        await mailbox.stop()  # the next one stays pending
        pending = await srv.services.db.transaction(
            lambda conn: outbox.queue(conn, srv.services.master_keys, kind="test", recipient="late@example.com",
                                      params={}, now=int(srv.clock.now())))
        await srv.running.mailer.flush()
        srv.clock.advance(30 * 86400 - 60)
        assert await srv.services.forget_old_mail() == 0
        srv.clock.advance(120)
        assert await srv.services.forget_old_mail() == 1
        assert await srv.db.read(repo.by_id, sent) is None
        assert (await srv.db.read(repo.by_id, pending)).status == "pending"
