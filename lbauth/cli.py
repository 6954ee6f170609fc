"""The `lbauth` command (contract section 2).

Every subcommand takes the settings flags and `--json`; results go to standard output, errors to
standard error as one line with a non-zero exit status (2: bad settings or usage, 1: the rest).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import inspect
import json
import os
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.engine import make_url

from lbauth import __version__, demo, logs, tracing
from lbauth import settings as settings_mod
from lbauth.clock import SystemClock
from lbauth.core import audit, resources
from lbauth.core.accounts import accounts, users
from lbauth.core.audit.log import AuditLog, describe
from lbauth.core.clients import apps, outbox
from lbauth.core.clients.apps import AppPolicy
from lbauth.core.crypto import keys
from lbauth.core.crypto.keys import RotationRefused
from lbauth.core.crypto.masterkey import MasterKeyError, MasterKeys, generate_key_text
from lbauth.core.crypto.reseal import master_keys_for
from lbauth.core.factors.factors import Factors, FactorsReset
from lbauth.core.mail import outbox as mail_outbox
from lbauth.core.oauth.checklist import ServerCheckList
from lbauth.core.oauth.server import GRANT_TYPE_NAMES
from lbauth.core.oidc.id_tokens import ID_TOKEN_ALGS
from lbauth.core.ratelimit import RateLimiter
from lbauth.core.registration import initial_tokens
from lbauth.errors import LbauthError, ServerUnavailable
from lbauth.handlers.account_json import account_change_json, audit_event_json, created_user_json, listed_user_json
from lbauth.handlers.operator_json import (
    app_json,
    client_secret_json,
    created_app_json,
    event_json,
    mail_json,
    webhook_secret_json,
)
from lbauth.logs import redact
from lbauth.settings import Settings, SettingsError
from lbauth.storage import migrate
from lbauth.storage.db import Database, open_database
from lbauth.storage.records import ListedAuditEvent

Command = Callable[[argparse.Namespace, Settings], Awaitable[Any]]


class CommandError(Exception):
    """A readable one-line failure of a command."""


# ---- output --------------------------------------------------------------------------------------

def _emit(result: Any, as_json: bool) -> None:
    if result is None:
        return
    if as_json:
        print(json.dumps(result, indent=2))
    elif isinstance(result, list):
        for i, item in enumerate(result):
            if i:
                print()
            _print_record(item)
        if not result:
            print("(none)")
    elif isinstance(result, dict):
        _print_record(result)
    else:
        print(result)


def _print_record(record: dict[str, Any]) -> None:
    width = max((len(k) for k in record), default=0)
    for key, value in record.items():
        if isinstance(value, list):
            value = ", ".join(map(str, value)) if value else "-"
        elif value is None:
            value = "-"
        elif isinstance(value, bool):
            value = "yes" if value else "no"
        print(f"{key.ljust(width)}  {value}")


# ---- database access for commands ----------------------------------------------------------------

async def _database(settings: Settings) -> Database:
    from lbauth.server import open_storage
    return await open_storage(settings)


async def with_database(settings: Settings, work: Callable[[Database], Awaitable[Any]]) -> Any:
    db = await _database(settings)
    try:
        return await work(db)
    finally:
        await db.close()


def operator() -> audit.Actor:
    """Who runs this command, as the audit log names them: the login name of the user running it."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        name = f"uid {os.getuid()}"
    return audit.Actor.operator(name)


# ---- commands ------------------------------------------------------------------------------------

def cmd_serve(args: argparse.Namespace, settings: Settings) -> None:
    from lbauth.server import serve
    settings_mod.check_for_serving(settings)
    if settings.otel:
        try:
            tracing.require()  # before a worker is forked: one line, not one per worker
        except tracing.TracingUnavailable as exc:
            raise SettingsError(str(exc)) from None
    serve(settings)  # runs its own event loop(s): several workers are forked processes


async def cmd_db_upgrade(args: argparse.Namespace, settings: Settings) -> dict:
    db = open_database(settings.database_url)
    try:
        before, after = await migrate.upgrade(db, settings.signing_alg)
    finally:
        await db.close()
    return {"from": before, "to": after}


def password_argument(args: argparse.Namespace) -> str:
    """`--password`, or else the first line of standard input (`echo ... | lbauth users create`, or
    typed at a prompt that does not echo it): a password on the command line shows in `ps`."""
    if args.password is not None:
        return str(args.password)
    if sys.stdin.isatty():
        import getpass
        return getpass.getpass("Password: ")
    line = sys.stdin.readline()
    if not line:
        raise CommandError("no password: give --password, or the password on standard input")
    return line.rstrip("\r\n")


async def cmd_users_create(args: argparse.Namespace, settings: Settings) -> dict:
    password = password_argument(args)
    return created_user_json(await with_database(settings, lambda db: users.create_user(
        db, SystemClock(), email=args.email, name=args.name, password=password, avatar=args.avatar or "",
        bio=args.bio or "", interest_tags=args.interest_tag or (), email_verified=args.email_verified,
        cost=settings.argon2)))


async def cmd_users_token(args: argparse.Namespace, settings: Settings) -> dict:
    async def work(db: Database) -> dict:
        session = await accounts.sign_in(db, SystemClock(), settings.user_token_ttl, args.email, args.password,
                                         actor=operator(), cost=settings.argon2)
        if isinstance(session, accounts.SecondStepNeeded):
            raise CommandError("this user has a second factor: sign in with POST /api/auth/login and "
                               "/api/auth/login/mfa instead")
        return {"token": session.token, "expiresIn": session.expires_in}
    return await with_database(settings, work)


async def with_accounts(settings: Settings, use: Callable[[accounts.Accounts], Awaitable[Any]]) -> Any:
    """The account use cases for one command: its check-list is only for what the command writes."""
    return await with_database(settings, lambda db: use(
        accounts.Accounts(db, SystemClock(), settings, ServerCheckList(max_age=None))))


async def cmd_users_list(args: argparse.Namespace, settings: Settings) -> list:
    return [listed_user_json(user) for user in await with_accounts(settings, lambda a: a.list_users())]


async def cmd_users_disable(args: argparse.Namespace, settings: Settings) -> dict:
    return account_change_json(await with_accounts(settings, lambda a: a.disable(args.email, operator())))


async def cmd_users_enable(args: argparse.Namespace, settings: Settings) -> dict:
    return account_change_json(await with_accounts(settings, lambda a: a.enable(args.email, operator())))


async def cmd_users_delete(args: argparse.Namespace, settings: Settings) -> dict:
    return account_change_json(await with_accounts(settings, lambda a: a.delete(args.email, operator())))


async def cmd_users_reset_factors(args: argparse.Namespace, settings: Settings) -> dict:
    """Contract 19: passkeys, TOTP and recovery codes removed, every session ended (a user who lost them)."""
    def reset(a: accounts.Accounts) -> Awaitable[FactorsReset]:
        def no_keys() -> MasterKeys:
            raise AssertionError("resetting factors seals nothing")
        return Factors(a.db, a.clock, settings, no_keys, a.sessions, RateLimiter(a.clock, False)).reset(
            args.email, operator())
    done = await with_accounts(settings, reset)
    return {"userId": done.user_id, "email": done.email, "status": "factors_reset"}


def _apps(db: Database, settings: Settings, master_keys: MasterKeys | None = None) -> apps.Apps:
    """The operator's apps; `master_keys` for the commands that seal a webhook secret."""
    def loaded() -> MasterKeys:
        assert master_keys is not None, "this command loads the master keys first"
        return master_keys
    policy = AppPolicy(development=settings.development, grant_types=GRANT_TYPE_NAMES)
    return apps.Apps(db, SystemClock(), loaded, policy)


async def _id_token_key(db: Database, settings: Settings, alg: str | None) -> None:
    """The key ring holds an active key for every algorithm an app asks for (contract 8): made
    before the app asks, so that no ID token is minted for it while its key does not exist yet."""
    if alg is not None:
        master_keys = await master_keys_for(db, settings)
        # On a database no server has started on yet, the first start's keys come first: else the
        # ID-token key would be the only active one, and access tokens would be signed with it.
        await keys.ensure_keys(db, SystemClock(), master_keys, settings.signing_alg)
        await keys.ensure_active_key(db, SystemClock(), master_keys, alg)


async def cmd_apps_create(args: argparse.Namespace, settings: Settings) -> dict:
    async def work(db: Database) -> dict:
        await _id_token_key(db, settings, args.id_token_alg)
        return created_app_json(await _apps(db, settings, await master_keys_for(db, settings)).create(
            name=args.name, owner_email=args.owner, redirect_uris=args.redirect_uri, allowed_scopes=args.scope,
            webhook_url=args.webhook_url, id_token_alg=args.id_token_alg,
            post_logout_redirect_uris=args.post_logout_redirect_uri or (), public=args.public, device=args.device,
            actor=operator()))
    return await with_database(settings, work)


async def cmd_apps_list(args: argparse.Namespace, settings: Settings) -> list:
    return [app_json(app) for app in await with_database(settings, lambda db: _apps(db, settings).all_apps())]


async def cmd_apps_show(args: argparse.Namespace, settings: Settings) -> dict:
    async def work(db: Database) -> dict:
        return app_json(await _apps(db, settings).get(args.client_id))
    return await with_database(settings, work)


async def cmd_apps_update(args: argparse.Namespace, settings: Settings) -> dict:
    async def work(db: Database) -> dict:
        await _id_token_key(db, settings, args.id_token_alg)
        return app_json(await _apps(db, settings).update(
            args.client_id, name=args.name, redirect_uris=args.redirect_uri,
            allowed_scopes=args.scope, webhook_url=args.webhook_url, enable_webhook=args.enable_webhook,
            id_token_alg=args.id_token_alg, post_logout_redirect_uris=args.post_logout_redirect_uri,
            require_par=args.require_par, require_dpop=args.require_dpop, device=args.device))
    return await with_database(settings, work)


async def cmd_apps_rotate_secret(args: argparse.Namespace, settings: Settings) -> dict:
    secret = await with_database(settings, lambda db: _apps(db, settings).rotate_client_secret(args.client_id,
                                                                                               operator()))
    return client_secret_json(args.client_id, secret)


async def cmd_apps_rotate_webhook_secret(args: argparse.Namespace, settings: Settings) -> dict:
    async def work(db: Database) -> dict:
        return webhook_secret_json(args.client_id, await _apps(db, settings, await master_keys_for(db, settings))
                                   .rotate_webhook_secret(args.client_id, operator()))
    return await with_database(settings, work)


async def cmd_apps_test_webhook(args: argparse.Namespace, settings: Settings) -> dict:
    return {"eventId": await with_database(settings, lambda db: outbox.send_test(db, SystemClock(), args.client_id))}


async def cmd_webhooks_list(args: argparse.Namespace, settings: Settings) -> list:
    events = await with_database(settings, lambda db: outbox.list_events(db, client_id=args.app, status=args.status))
    return [event_json(event, with_error=not args.json) for event in events]


async def cmd_webhooks_redeliver(args: argparse.Namespace, settings: Settings) -> dict:
    return event_json(await with_database(settings, lambda db: outbox.redeliver(db, SystemClock(), args.event_id)))


async def cmd_mail_list(args: argparse.Namespace, settings: Settings) -> list:
    return [mail_json(message) for message in
            await with_database(settings, lambda db: mail_outbox.list_messages(db, status=args.status))]


async def cmd_mail_redeliver(args: argparse.Namespace, settings: Settings) -> dict:
    return mail_json(await with_database(settings, lambda db: mail_outbox.redeliver(db, SystemClock(),
                                                                                    args.message_id)))


async def cmd_mail_test(args: argparse.Namespace, settings: Settings) -> dict:
    async def work(db: Database) -> dict:
        return {"messageId": await mail_outbox.send_test(db, SystemClock(), await master_keys_for(db, settings),
                                                         args.to)}
    return await with_database(settings, work)


async def cmd_registration_tokens_create(args: argparse.Namespace, settings: Settings) -> dict:
    return await with_database(settings, lambda db: initial_tokens.create(db, SystemClock(), args.expires_in))


async def cmd_resources_add(args: argparse.Namespace, settings: Settings) -> dict:
    return await with_database(settings, lambda db: resources.add_resource(db, SystemClock(), args.uri, name=args.name,
                                                                           scopes=args.scope))


async def cmd_resources_list(args: argparse.Namespace, settings: Settings) -> list:
    return await with_database(settings, resources.list_resources)


async def cmd_resources_remove(args: argparse.Namespace, settings: Settings) -> dict:
    return await with_database(settings, lambda db: resources.remove_resource(db, args.uri))


async def cmd_keys_list(args: argparse.Namespace, settings: Settings) -> list:
    return await with_database(settings, keys.list_keys)


async def cmd_audit_list(args: argparse.Namespace, settings: Settings) -> None:
    """The audit log, newest first, read a page at a time and printed as it comes: a table, or
    with --json one JSON object per line (JSON lines). Prints itself: nothing is returned."""
    async def work(db: Database) -> None:
        log = AuditLog(db, SystemClock(), settings.audit_retention_days)
        shown = 0
        async for item in log.listed(email=args.user, event_type=args.type, since=args.since, limit=args.limit):
            if args.json:
                print(json.dumps({**audit_event_json(item.event), "email": item.email}))
            else:
                if not shown:
                    print(_audit_row("TIME (UTC)", "TYPE", "OUTCOME", "ACTOR", "USER", "WHAT"))
                print(_audit_line(item))
            shown += 1
        if not shown and not args.json:
            print("(none)")
    await with_database(settings, work)


def _audit_line(item: ListedAuditEvent) -> str:
    event = item.event
    actor = event.actor_type + (f" {event.actor_id}" if event.actor_id and event.actor_type != "user" else "")
    when = datetime.fromtimestamp(event.occurred_at, UTC).strftime("%Y-%m-%d %H:%M:%S")
    return _audit_row(when, event.type, event.outcome, actor, item.email or event.user_id or "-", describe(event))


_AUDIT_COLUMNS = (19, 26, 7, 22, 32)  # the widths of all columns but the last


def _audit_row(*cells: str) -> str:
    """One line of the table: fixed-width columns (a longer cell cut, ending in …), then the last."""
    *fixed, last = cells
    cut = [cell if len(cell) <= width else cell[:width - 1] + "…" for cell, width in zip(fixed, _AUDIT_COLUMNS,
                                                                                       strict=True)]
    return "  ".join([cell.ljust(width) for cell, width in zip(cut, _AUDIT_COLUMNS, strict=True)] + [last])


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def iso_time(text: str) -> int:
    """`--since`: an ISO 8601 date or time (UTC unless it says otherwise), as Unix seconds."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 date or time; write it as 2030-03-17 or "
                                         "2030-03-17T10:00:00Z") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp())


def cmd_keys_new_master_key(args: argparse.Namespace, settings: Settings) -> dict | str:
    """A new master key (contract 8): the key alone on its line, for LBAUTH_MASTER_KEY or a key
    file; with --json, the key and its id (the id that the refusal to start names)."""
    text = generate_key_text()
    return {"keyId": MasterKeys.parse(text, "key").primary_id, "key": text} if args.json else text


async def cmd_demo(args: argparse.Namespace, settings: Settings) -> dict | None:
    if not settings.development:
        raise CommandError("demo creates a user whose password is printed and published in the README: "
                           "it runs in development only (LBAUTH_ENV=development)")

    async def work(db: Database) -> dict:
        return await demo.ensure_demo(db, SystemClock(), await master_keys_for(db, settings), settings)
    result = await with_database(settings, work)
    if args.json:
        return result
    print(demo.describe(result))
    return None


# ---- the parser ----------------------------------------------------------------------------------

def settings_parser() -> argparse.ArgumentParser:
    """The settings flags and --json, for every command (tools/ use it too)."""
    return _settings_flags()


def _settings_flags(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """`--json`, then the settings as their own group, added to `parser` (after its own options,
    so that `--help` shows those first) or to a new parent parser."""
    common = parser or argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="machine-readable output")
    group = common.add_argument_group("settings (each also an LBAUTH_* variable or a --config TOML key; "
                                      "flags win over variables, variables over the file)")
    group.add_argument("--config", metavar="FILE", help="a TOML settings file")
    for name in settings_mod.FLAG_SETTINGS:
        group.add_argument(settings_mod.flag_name(name), dest=f"setting_{name}", metavar="VALUE",
                           help=f"(env {settings_mod.env_name(name)})")
    return common


def build_parser() -> argparse.ArgumentParser:
    commands: list[argparse.ArgumentParser] = []  # given the settings flags last, below
    parser = argparse.ArgumentParser(prog="lbauth", description="lbauth: OAuth2 authorization and token service")
    parser.add_argument("--version", action="version", version=f"lbauth {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(parent: Any, name: str, handler: Command, help_text: str) -> argparse.ArgumentParser:
        p = parent.add_parser(name, help=help_text, description=help_text)
        commands.append(p)
        p.set_defaults(handler=handler)
        return p

    command(sub, "serve", cmd_serve, "serve the API and the pages on one port")
    command(sub, "demo", cmd_demo, "create the demo user and app if absent (used by `make run`)")

    db = sub.add_parser("db", help="database schema").add_subparsers(dest="db_command", metavar="COMMAND",
                                                                      required=True)
    command(db, "upgrade", cmd_db_upgrade, "apply pending schema migrations")

    u = sub.add_parser("users", help="user accounts").add_subparsers(dest="users_command", metavar="COMMAND",
                                                                       required=True)
    p = command(u, "create", cmd_users_create, "create a user")
    p.add_argument("--email", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--password", help="the password (shows in `ps`: leave it out to read it from standard input)")
    p.add_argument("--avatar", metavar="URL")
    p.add_argument("--bio", metavar="TEXT")
    p.add_argument("--interest-tag", metavar="T", action="append")
    p.add_argument("--email-verified", action="store_true", help="the email is known to be the user's (OpenID)")
    p = command(u, "token", cmd_users_token, "log in and print a user token (as POST /api/auth/login)")
    p.add_argument("--email", required=True)
    p.add_argument("--password", required=True)
    command(u, "list", cmd_users_list, "list the accounts (deleted ones are gone)")
    p = command(u, "disable", cmd_users_disable, "disable an account: sessions ended, tokens refused, grants kept")
    p.add_argument("email", metavar="EMAIL")
    p = command(u, "enable", cmd_users_enable, "enable a disabled account (its old tokens stay refused)")
    p.add_argument("email", metavar="EMAIL")
    p = command(u, "delete", cmd_users_delete, "delete an account: grants revoked, personal data erased")
    p.add_argument("email", metavar="EMAIL")
    p = command(u, "reset-factors", cmd_users_reset_factors,
                "remove an account's second factors and recovery codes; its sessions end")
    p.add_argument("email", metavar="EMAIL")

    a = sub.add_parser("apps", help="registered applications").add_subparsers(dest="apps_command",
                                                                               metavar="COMMAND", required=True)
    p = command(a, "create", cmd_apps_create, "register an app; prints its secrets this once")
    p.add_argument("--name", required=True)
    p.add_argument("--owner", required=True, metavar="EMAIL")
    p.add_argument("--redirect-uri", required=True, action="append", metavar="URI")
    p.add_argument("--scope", action="append", metavar="S", help="an allowed scope (default: every scope)")
    p.add_argument("--webhook-url", metavar="URL")
    p.add_argument("--id-token-alg", choices=ID_TOKEN_ALGS, default="RS256",
                   help="the algorithm of its ID tokens (default %(default)s)")
    p.add_argument("--post-logout-redirect-uri", action="append", metavar="URI",
                   help="where RP-initiated logout may send the user back (OpenID Connect)")
    p.add_argument("--public", action="store_true",
                   help="a public client (no secret; PKCE required; rotating refresh tokens)")
    p.add_argument("--device", action="store_true",
                   help="it may use the device grant (RFC 8628): sign-in on a TV or command-line tool with a code")
    command(a, "list", cmd_apps_list, "list apps")
    p = command(a, "show", cmd_apps_show, "show one app")
    p.add_argument("client_id", metavar="CLIENT_ID")
    p = command(a, "update", cmd_apps_update, "change an app's name, redirect URIs, scopes or webhook URL")
    p.add_argument("client_id", metavar="CLIENT_ID")
    p.add_argument("--name")
    p.add_argument("--redirect-uri", action="append", metavar="URI", help="replaces the list")
    p.add_argument("--scope", action="append", metavar="S", help="replaces the list")
    p.add_argument("--webhook-url", metavar="URL", help='"" removes the webhook')
    p.add_argument("--enable-webhook", action="store_true", help="re-enable a webhook disabled by a 410")
    p.add_argument("--id-token-alg", choices=ID_TOKEN_ALGS, help="the algorithm of its ID tokens")
    p.add_argument("--post-logout-redirect-uri", action="append", metavar="URI", help="replaces the list")
    p.add_argument("--require-par", action=argparse.BooleanOptionalAction, default=None,
                   help="accept only pushed authorization requests (RFC 9126) at /oauth/ (--no-require-par: any)")
    p.add_argument("--require-dpop", action=argparse.BooleanOptionalAction, default=None,
                   help="issue it only DPoP-bound tokens (RFC 9449): a token request without a proof is refused")
    p.add_argument("--device", action=argparse.BooleanOptionalAction, default=None,
                   help="allow the device grant (RFC 8628) in its grant types (--no-device: remove it)")
    p = command(a, "rotate-secret", cmd_apps_rotate_secret, "issue a new client secret; prints it this once")
    p.add_argument("client_id", metavar="CLIENT_ID")
    p = command(a, "rotate-webhook-secret", cmd_apps_rotate_webhook_secret,
                "issue a new webhook secret; prints it this once")
    p.add_argument("client_id", metavar="CLIENT_ID")

    p = command(a, "test-webhook", cmd_apps_test_webhook,
                "queue a test delivery (reason test_delivery; no grant is touched); the server sends it")
    p.add_argument("client_id", metavar="CLIENT_ID")

    w = sub.add_parser("webhooks", help="the webhook outbox").add_subparsers(dest="webhooks_command",
                                                                              metavar="COMMAND", required=True)
    p = command(w, "list", cmd_webhooks_list, "list webhook events, newest first")
    p.add_argument("--app", metavar="CLIENT_ID", help="only this app's events")
    p.add_argument("--status", choices=outbox.STATUSES)
    p = command(w, "redeliver", cmd_webhooks_redeliver, "queue an event again, now, with a fresh retry schedule")
    p.add_argument("event_id", metavar="EVENT_ID")

    m = sub.add_parser("mail", help="the mail outbox").add_subparsers(dest="mail_command", metavar="COMMAND",
                                                                       required=True)
    p = command(m, "list", cmd_mail_list, "list mail messages, newest first")
    p.add_argument("--status", choices=mail_outbox.STATUSES)
    p = command(m, "redeliver", cmd_mail_redeliver, "queue a message again, now, with a fresh retry schedule")
    p.add_argument("message_id", metavar="MESSAGE_ID")
    p = command(m, "test", cmd_mail_test, "queue a short test message; the server sends it")
    p.add_argument("--to", required=True, metavar="ADDRESS")

    r = sub.add_parser("registration-tokens", help="initial access tokens for dynamic registration").add_subparsers(
        dest="registration_tokens_command", metavar="COMMAND", required=True)
    p = command(r, "create", cmd_registration_tokens_create,
                "an initial access token for POST /oauth/register (RFC 7591), reusable until it expires; "
                "prints it this once")
    p.add_argument("--expires-in", type=int, default=initial_tokens.DEFAULT_TTL, metavar="SECONDS",
                   help="its lifetime (default %(default)s: 24 hours)")
    r = sub.add_parser("resources", help="protected resources (RFC 8707 resource indicators)").add_subparsers(
        dest="resources_command", metavar="COMMAND", required=True)
    p = command(r, "add", cmd_resources_add, "register a protected resource that tokens may be issued for")
    p.add_argument("uri", metavar="URI", help="an absolute URI without a fragment: what the tokens' aud carries")
    p.add_argument("--name", help="shown on the consent page (default: the URI's host)")
    p.add_argument("--scope", action="append", metavar="S",
                   help="a scope its tokens may carry; others are dropped (default: every scope)")
    command(r, "list", cmd_resources_list, "list the protected resources")
    p = command(r, "remove", cmd_resources_remove, "remove a protected resource (its tokens run until they expire)")
    p.add_argument("uri", metavar="URI", help="compared after normalisation")

    au = sub.add_parser("audit", help="the audit log: who did what to accounts, apps and keys").add_subparsers(
        dest="audit_command", metavar="COMMAND", required=True)
    p = command(au, "list", cmd_audit_list, "list audit events, newest first (JSON lines with --json)")
    p.add_argument("--user", metavar="EMAIL", help="only this user's events (or a user id: usr_..., for a deleted "
                                                   "account)")
    p.add_argument("--type", choices=[t.value for t in audit.EventType], metavar="T",
                   help="only events of this type: " + ", ".join(t.value for t in audit.EventType))
    p.add_argument("--since", type=iso_time, metavar="ISO",
                   help="only events at or after this time: 2030-03-17 or 2030-03-17T10:00:00Z (UTC by default)")
    p.add_argument("--limit", type=positive_int, metavar="N", help="at most this many (the newest)")

    k = sub.add_parser("keys", help="signing keys and master keys").add_subparsers(
        dest="keys_command", metavar="COMMAND", required=True)
    command(k, "list", cmd_keys_list, "list signing keys and their states")
    command(k, "new-master-key", cmd_keys_new_master_key,
            "print a new master key (for LBAUTH_MASTER_KEY: the same list on every server)")
    for p in commands:
        own = " ".join(p.format_usage().removeprefix("usage: ").split())
        p.usage = own.replace("%", "%%") + " [--json] [SETTINGS]"  # the 22 settings flags: below, grouped
        _settings_flags(p)
    return parser


def _settings_from(args: argparse.Namespace) -> Settings:
    flags = {name: getattr(args, f"setting_{name}") for name in settings_mod.FLAG_SETTINGS}
    flags["config"] = args.config
    return settings_mod.load(flags)


def _shown_url(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__
    orig = getattr(cause, "orig", None) or cause
    return redact(str(orig).splitlines()[0]) if orig and str(orig) else type(orig).__name__


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run(args, prog="lbauth", log_level=None if args.command == "serve" else "WARNING")


def run(args: argparse.Namespace, *, prog: str, log_level: str | None = "WARNING") -> int:
    """Load settings, run `args.handler(args, settings)`, print its result; every failure is one
    line on standard error and an exit status (2: settings, 1: the rest). Used by the maintainers'
    scripts in tools/ as well."""
    try:
        settings = _settings_from(args)
    except SettingsError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    logs.setup(log_level or settings.log_level)
    try:
        outcome = args.handler(args, settings)
        result = asyncio.run(outcome) if inspect.iscoroutine(outcome) else outcome
    except SettingsError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except ServerUnavailable as exc:
        print(f"{prog}: cannot reach the database {_shown_url(settings.database_url)}: "
              f"{_cause(exc)}", file=sys.stderr)
        return 1
    except LbauthError as exc:
        print(f"{prog}: {exc.message}", file=sys.stderr)
        return 1
    except (migrate.SchemaOutOfDate, MasterKeyError, CommandError, RotationRefused) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{prog}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    _emit(result, args.json)
    return 0
