"""Sign-up, email verification and change, and password reset (contract 18), without ever telling
a stranger whether an address has an account.

A request that names an address (sign-up, forgot password) does the same work whatever the
address: it checks what it was sent, hashes the password when there is one, and writes one message
to the mail outbox. Whether the address has an account is decided later, off the request path, when
the mailer composes the message (the `compose_*` methods): a confirmation link or a "you already
have an account" notice for a sign-up, a reset link or nothing for a reset. Answers and timing are
therefore the same for every address.

Following a link (lbauth.core.accounts.links) does what the link was for, once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from lbauth import errors
from lbauth.clock import Clock
from lbauth.core import audit
from lbauth.core.accounts import links, passwords
from lbauth.core.accounts.letters import letter
from lbauth.core.accounts.links import KINDS, LinkKind
from lbauth.core.accounts.sessions import BROWSER, Sessions, announce_user_changed, end_all, open_session
from lbauth.core.accounts.users import checked_name, normalize_email
from lbauth.core.crypto import opaque
from lbauth.core.crypto.masterkey import MasterKeyError, MasterKeys
from lbauth.core.mail import outbox
from lbauth.core.mail.outbox import Composer, Letter, MailRequest
from lbauth.settings import Settings
from lbauth.storage import Connection, Duplicate
from lbauth.storage.db import Database
from lbauth.storage.records import User
from lbauth.storage.repo import apps as apps_repo
from lbauth.storage.repo import changes as changes_repo
from lbauth.storage.repo import users as users_repo

# The kinds of message this module writes to the outbox, and composes.
SIGNUP = "signup"
RESET = "password_reset"
VERIFY = "email_verification"
EMAIL_CHANGE = "email_change"
EMAIL_CHANGED = "email_changed_notice"
PASSWORD_RESET_DONE = "password_reset_notice"  # noqa: S105 (a kind of message)


class SecondStep(Protocol):
    """A reset must not bypass a second factor (contract 18 and 19): for a user who has one,
    `demand` raises unless `answer` (the request's `method` and `code`) proves it."""

    async def demand(self, user: User, answer: Mapping[str, Any], source: audit.Source = audit.NO_SOURCE) -> None: ...


class NoSecondStep:
    """No user has a second factor yet."""

    async def demand(self, user: User, answer: Mapping[str, Any], source: audit.Source = audit.NO_SOURCE) -> None:
        return None


@dataclass(frozen=True)
class SignedUp:
    user: User
    session_token: str
    return_to: str | None  # the /oauth/ request the sign-up started from


def return_address(target: object) -> str | None:
    """Only an authorization request on this server (`/oauth/?...`) is remembered across a sign-up."""
    if not isinstance(target, str) or len(target) > 4096 or "\\" in target:
        return None
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or parts.path not in ("/oauth", "/oauth/"):
        return None
    return target


class Recovery:
    """The use cases of contract 18. `master_keys` is a callable: keys are reloaded on rotation."""

    def __init__(self, db: Database, clock: Clock, settings: Settings, master_keys: Callable[[], MasterKeys],
                 sessions: Sessions, second_step: SecondStep | None = None) -> None:
        self.db, self.clock, self.settings, self.master_keys = db, clock, settings, master_keys
        self.sessions = sessions
        self.second_step: SecondStep = second_step or NoSecondStep()
        self.site = urlsplit(settings.auth_url).netloc or settings.auth_url

    # ---- requests: the same work whatever the address -------------------------------------------

    async def request_signup(self, *, name: object, email: object, password: object,
                             return_to: object = None) -> None:
        """POST /api/auth/signup: the account is made only when the emailed link is followed."""
        address = normalize_email(email if isinstance(email, str) else "")
        name = checked_name(name)
        if not isinstance(password, str):
            raise errors.ValidationFailed("password must be a string", field="password")
        await passwords.refuse_weak(password, address, name)
        password_hash = await passwords.hash_password(password, self.settings.argon2)
        await self._queue(SIGNUP, address, {"name": name, "passwordHash": password_hash,
                                            "returnTo": return_address(return_to)})

    async def request_reset(self, email: object) -> None:
        """POST /api/auth/password/forgot."""
        await self._queue(RESET, normalize_email(email if isinstance(email, str) else ""), {})

    async def request_verification(self, user: User) -> bool:
        """POST /api/account/email/verify: False when the address is verified already."""
        if user.email_verified:
            return False
        await self._queue(VERIFY, user.email, {"userId": user.id})
        return True

    async def request_email_change(self, user: User, new_email: object, password: object) -> None:
        """POST /api/account/email: the password, then a link to the new address. An address
        another account has gets the same answer, and no link."""
        stored = await self.db.read(users_repo.by_id, user.id)
        if stored is None or not isinstance(password, str) or not await passwords.verify_password(
                stored.password_hash or None, password, self.settings.argon2):
            raise errors.LoginFailed("The password is wrong.")
        address = normalize_email(new_email if isinstance(new_email, str) else "")
        if address == stored.email:
            raise errors.ValidationFailed("newEmail is already this account's address", field="newEmail")
        await self._queue(EMAIL_CHANGE, address, {"userId": user.id, "oldEmail": stored.email})

    async def _queue(self, kind: str, recipient: str, params: dict[str, Any]) -> None:
        now, keys = int(self.clock.now()), self.master_keys()

        def work(conn: Connection) -> None:
            outbox.queue(conn, keys, kind=kind, recipient=recipient, params=params, now=now)
        await self.db.transaction(work, single_statement=True)

    # ---- composing, off the request path (the mailer calls these) --------------------------------

    def composers(self) -> dict[str, Composer]:
        return {SIGNUP: self.compose_signup, RESET: self.compose_reset, VERIFY: self.compose_verification,
                EMAIL_CHANGE: self.compose_email_change, EMAIL_CHANGED: self.compose_email_changed,
                PASSWORD_RESET_DONE: self.compose_reset_done}

    async def compose_signup(self, request: MailRequest) -> Letter | None:
        """A confirmation link; or, to an address that has an account, a notice instead."""
        now, keys, params = int(self.clock.now()), self.master_keys(), request.params
        payload = json.dumps({"name": params["name"], "passwordHash": params["passwordHash"],
                              "returnTo": params.get("returnTo")}).encode()

        def work(conn: Connection) -> tuple[str | None, str | None]:
            app_name = _app_name(conn, params.get("returnTo"))
            if users_repo.by_email(conn, request.recipient) is not None:
                return None, app_name
            return links.issue(conn, LinkKind.SIGNUP, email=request.recipient, user_id=None, now=now,
                               payload=payload, master_keys=keys), app_name
        token, app_name = await self.db.transaction(work)
        if token is None:
            return letter(site=self.site, app_name=app_name, subject=f"Someone tried to sign up at {self.site}",
                          paragraphs=["Someone, maybe you, tried to make a new account with this address, "
                                      "but it already has one. No new account was made."],
                          action="Sign in", link=f"{self.settings.auth_url}/login",
                          after=["If you forgot your password, use \"Forgot your password?\" on the sign-in page."])
        return letter(site=self.site, app_name=app_name, subject=f"Confirm your new account at {self.site}",
                      paragraphs=[f"Welcome, {params['name']}. Confirm this address to finish making your account."],
                      action="Confirm my account", link=links.link(self.settings.auth_url, LinkKind.SIGNUP, token),
                      after=["The link works once, within 24 hours."])

    async def compose_reset(self, request: MailRequest) -> Letter | None:
        """A reset link that voids the older ones; nothing for an address without an active account."""
        now = int(self.clock.now())

        def work(conn: Connection) -> str | None:
            user = users_repo.by_email(conn, request.recipient)
            if user is None or not user.active:
                return None
            links.void_older(conn, user.id, LinkKind.RESET, now)
            return links.issue(conn, LinkKind.RESET, email=user.email, user_id=user.id, now=now)
        token = await self.db.transaction(work)
        if token is None:
            return None
        minutes = KINDS[LinkKind.RESET].lifetime // 60
        return letter(site=self.site, subject=f"Reset your password at {self.site}",
                      paragraphs=["Someone, maybe you, asked to reset the password of this account."],
                      action="Choose a new password", link=links.link(self.settings.auth_url, LinkKind.RESET, token),
                      after=[f"The link works once, within {minutes} minutes; asking again makes this one stop "
                             "working. Your password stays the same until you choose a new one."])

    async def compose_verification(self, request: MailRequest) -> Letter | None:
        now, user_id = int(self.clock.now()), request.params["userId"]

        def work(conn: Connection) -> str | None:
            user = users_repo.by_id(conn, user_id)
            if user is None or not user.active or user.email_verified or user.email != request.recipient:
                return None
            return links.issue(conn, LinkKind.VERIFY, email=user.email, user_id=user.id, now=now)
        token = await self.db.transaction(work)
        if token is None:
            return None
        return letter(site=self.site, subject=f"Verify your email address at {self.site}",
                      paragraphs=["Confirm that this address is yours."],
                      action="Verify my address", link=links.link(self.settings.auth_url, LinkKind.VERIFY, token),
                      after=["The link works once, within 24 hours."])

    async def compose_email_change(self, request: MailRequest) -> Letter | None:
        """A link to the new address; nothing when another account has it, or the account's
        address changed meanwhile."""
        now, params = int(self.clock.now()), request.params

        def work(conn: Connection) -> str | None:
            user = users_repo.by_id(conn, params["userId"])
            if (user is None or not user.active or user.email != params["oldEmail"]
                    or users_repo.by_email(conn, request.recipient) is not None):
                return None
            links.void_older(conn, user.id, LinkKind.EMAIL_CHANGE, now)  # the newest request is the one meant
            return links.issue(conn, LinkKind.EMAIL_CHANGE, email=request.recipient, user_id=user.id, now=now)
        token = await self.db.transaction(work)
        if token is None:
            return None
        return letter(site=self.site, subject=f"Confirm your new email address at {self.site}",
                      paragraphs=["Someone, maybe you, asked to use this address for their account. Confirm it "
                                  "to make the change; until then the account keeps its old address."],
                      action="Use this address",
                      link=links.link(self.settings.auth_url, LinkKind.EMAIL_CHANGE, token),
                      after=["The link works once, within 24 hours."])

    async def compose_email_changed(self, request: MailRequest) -> Letter | None:
        return letter(site=self.site, subject=f"Your email address at {self.site} was changed",
                      paragraphs=[f"The account that used this address now uses {request.params['newEmail']}.",
                                  "If you did not make this change, reset your password and contact the site's "
                                  "operators."])

    async def compose_reset_done(self, request: MailRequest) -> Letter | None:
        return letter(site=self.site, subject=f"Your password at {self.site} was reset",
                      paragraphs=["The password of your account was just reset with a link sent to this "
                                  "address, and every device was signed out.",
                                  "If this was not you, reset your password again and contact the site's operators."])

    # ---- following a link ------------------------------------------------------------------------

    async def confirm_signup(self, token: object, *, source: audit.Source = audit.NO_SOURCE) -> SignedUp:
        """The account, verified, and a browser session for it (contract 18)."""
        now, keys = int(self.clock.now()), self.master_keys()

        def work(conn: Connection) -> tuple[User, str | None]:
            found = links.take(conn, LinkKind.SIGNUP, token, now)
            try:
                sealed = links.payload_of(found, keys) if found is not None else None
            except MasterKeyError:
                sealed = None
            if found is None or sealed is None:
                raise errors.LinkInvalid()
            payload = json.loads(sealed)
            user = User(id=opaque.new_id("usr_"), email=found.email, name=payload["name"], avatar="", bio="",
                        interest_tags=[], password_hash=payload["passwordHash"], created_at=now, disabled_at=None,
                        deleted_at=None, email_verified=True)
            try:
                users_repo.insert_user(conn, user)
            except Duplicate:
                raise errors.LinkInvalid("An account with this address exists already; sign in.") from None
            return user, return_address(payload.get("returnTo"))
        user, return_to = await self.db.transaction(work)
        session_token, _ = await open_session(self.db, self.clock, user, kind=BROWSER, ttl=self.settings.user_token_ttl,
                                              source=source, method="signup")
        return SignedUp(user, session_token, return_to)

    async def verify_email(self, token: object, source: audit.Source = audit.NO_SOURCE) -> str:
        """The address the link proved; seen as `email_verified` by every process within 5 s."""
        now = int(self.clock.now())

        def work(conn: Connection) -> str:
            found = links.take(conn, LinkKind.VERIFY, token, now)
            user = users_repo.by_id(conn, found.user_id) if found is not None and found.user_id else None
            if (found is None or user is None or not user.active
                    or not users_repo.set_email_verified(conn, user.id, found.email)):
                raise errors.LinkInvalid()
            announce_user_changed(conn, user.id, now)
            audit.record(conn, now, audit.EventType.EMAIL_VERIFIED, audit.Actor.user(user.id), source=source)
            changes_repo.notify(conn)
            return found.email
        email = await self.db.transaction(work)
        await self.sessions.learn_now()
        return email

    async def confirm_email_change(self, token: object, source: audit.Source = audit.NO_SOURCE) -> str:
        """The new address, now the account's (verified); a notice goes to the old one."""
        now, keys = int(self.clock.now()), self.master_keys()

        def work(conn: Connection) -> str:
            found = links.take(conn, LinkKind.EMAIL_CHANGE, token, now)
            user = users_repo.by_id(conn, found.user_id) if found is not None and found.user_id else None
            if found is None or user is None or not user.active:
                raise errors.LinkInvalid()
            try:
                changed = users_repo.change_email(conn, user.id, user.email, found.email)
            except Duplicate:
                raise errors.LinkInvalid("Another account uses this address now.") from None
            if not changed:
                raise errors.LinkInvalid()
            links.void_older(conn, user.id, LinkKind.EMAIL_CHANGE, now)
            links.void_older(conn, user.id, LinkKind.VERIFY, now)  # they were for the old address
            announce_user_changed(conn, user.id, now)
            changes_repo.notify(conn)
            outbox.queue(conn, keys, kind=EMAIL_CHANGED, recipient=user.email, params={"newEmail": found.email},
                         now=now)
            audit.record(conn, now, audit.EventType.EMAIL_CHANGED, audit.Actor.user(user.id), source=source)
            return found.email
        email = await self.db.transaction(work)
        await self.sessions.learn_now()
        return email

    async def reset_link_works(self, token: object) -> bool:
        """The reset page's first look: the form is shown only for a live link (not used by this)."""
        now = int(self.clock.now())
        return await self.db.read(lambda conn: links.find(conn, LinkKind.RESET, token, now)) is not None

    async def reset_password(self, token: object, new_password: object, answer: Mapping[str, Any],
                             source: audit.Source = audit.NO_SOURCE) -> None:
        """POST /api/auth/password/reset: the new password, after the user's second factor if they
        have one; every session ends (on every process within 5 s), grants stay, a notice is sent.
        A refused password or second step leaves the link usable."""
        now = int(self.clock.now())
        found = await self.db.read(lambda conn: links.find(conn, LinkKind.RESET, token, now))
        user = await self.db.read(users_repo.by_id, found.user_id) if found and found.user_id else None
        if found is None or user is None or not user.active:
            raise errors.ResetInvalid()
        if not isinstance(new_password, str):
            raise errors.ValidationFailed("newPassword must be a string", field="newPassword")
        await passwords.refuse_weak(new_password, user.email, user.name)
        await self.second_step.demand(user, answer, source)
        password_hash = await passwords.hash_password(new_password, self.settings.argon2)
        keys = self.master_keys()

        def work(conn: Connection) -> None:
            if links.take(conn, LinkKind.RESET, token, now) is None:
                raise errors.ResetInvalid()
            links.void_older(conn, user.id, LinkKind.RESET, now)
            links.void_older(conn, user.id, LinkKind.MFA, now)  # a second step begun with the old password
            users_repo.set_password_hash(conn, user.id, password_hash)
            users_repo.set_email_verified(conn, user.id, found.email)  # the link proved the address
            ended = end_all(conn, user.id, now)
            announce_user_changed(conn, user.id, now)
            outbox.queue(conn, keys, kind=PASSWORD_RESET_DONE, recipient=user.email, params={}, now=now)
            audit.record(conn, now, audit.EventType.PASSWORD_RESET, audit.Actor.user(user.id), source=source,
                         detail={"endedSessions": ended})
        await self.db.transaction(work)
        await self.sessions.learn_now()

    async def forget_expired_links(self) -> int:
        now = int(self.clock.now())
        return await self.db.transaction(lambda conn: links.delete_expired(conn, now), single_statement=True)


def _app_name(conn: Connection, return_to: object) -> str | None:
    """The app whose authorization request a sign-up started from, for the letter."""
    if not isinstance(return_to, str):
        return None
    client_id = parse_qs(urlsplit(return_to).query).get("client_id", [None])[0]
    app = apps_repo.by_client_id(conn, client_id) if client_id else None
    return app.name if app is not None else None
