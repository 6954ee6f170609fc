"""A user's second factors (contract 19): enrolling, confirming and removing a TOTP authenticator,
recovery codes, and the second step of a sign-in and of a password reset.

A second step is checked inside one transaction with what it uses: a TOTP code moves the
authenticator's `last_step` forward with a conditional UPDATE and a recovery code is marked used
with one (`... WHERE used_at IS NULL`), so two concurrent uses of one code never both pass, on
either database. Wrong second steps are limited per account (`mfa-account`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from lbauth import errors
from lbauth.clock import Clock
from lbauth.core import audit
from lbauth.core.accounts import links
from lbauth.core.accounts.accounts import NewSession
from lbauth.core.accounts.letters import letter
from lbauth.core.accounts.links import LinkKind
from lbauth.core.accounts.sessions import Sessions, SignedIn, announce_user_changed, end_all, open_session
from lbauth.core.accounts.users import normalize_email
from lbauth.core.crypto.masterkey import MasterKeys
from lbauth.core.factors import recovery_codes, totp
from lbauth.core.mail import outbox
from lbauth.core.mail.outbox import Composer, Letter, MailRequest
from lbauth.core.ratelimit import RateLimiter
from lbauth.settings import Settings
from lbauth.storage import Connection
from lbauth.storage.db import Database
from lbauth.storage.records import Passkey, User
from lbauth.storage.repo import changes as changes_repo
from lbauth.storage.repo import factors as repo
from lbauth.storage.repo import links as links_repo
from lbauth.storage.repo import users as users_repo

RECENT_SIGN_IN = 300  # seconds: removing a factor or regenerating codes needs a sign-in this recent
AMR_OTP = "pwd otp mfa"  # RFC 8176 2: password, then a one-time password (TOTP or a recovery code)
LIMIT = "mfa-account"

# The notices this module writes to the mail outbox, and composes.
FACTOR_ADDED = "factor_added_notice"
FACTOR_REMOVED = "factor_removed_notice"
RECOVERY_CODE_USED = "recovery_code_used_notice"


class Method(StrEnum):
    """The second steps, in the order they are offered."""
    TOTP = "totp"
    PASSKEY = "passkey"  # in a browser only (passkeys.py)
    RECOVERY_CODE = "recovery_code"


def totp_purpose(user_id: str) -> str:
    """A user's TOTP secret opens only in their row."""
    return f"totp secret {user_id}"


@dataclass(frozen=True)
class Enrolment:
    secret: str  # base32, shown once for typing into an app
    otpauth_uri: str
    qr_svg: str


@dataclass(frozen=True)
class Security:
    totp: bool
    passkeys: list[Passkey]
    recovery_codes_left: int


@dataclass(frozen=True)
class Confirmed:
    recovery_codes: list[str] | None  # shown once: only when this is the user's first factor


@dataclass(frozen=True)
class FactorsReset:
    user_id: str
    email: str


class Factors:
    """The use cases of second factors. `master_keys` is a callable: keys are reloaded on rotation."""

    def __init__(self, db: Database, clock: Clock, settings: Settings, master_keys: Callable[[], MasterKeys],
                 sessions: Sessions, limiter: RateLimiter) -> None:
        self.db, self.clock, self.settings, self.master_keys = db, clock, settings, master_keys
        self.sessions, self.limiter = sessions, limiter
        self.site = urlsplit(settings.auth_url).netloc or settings.auth_url

    # ---- what the user has -----------------------------------------------------------------------

    async def security(self, user: User) -> Security:
        def work(conn: Connection) -> Security:
            found = repo.totp_of(conn, user.id)
            return Security(found is not None and found[1] is not None, repo.passkeys_of(conn, user.id),
                            repo.codes_left(conn, user.id))
        return await self.db.read(work)

    # ---- TOTP ------------------------------------------------------------------------------------

    async def enrol_totp(self, user: User) -> Enrolment:
        """A new, unconfirmed authenticator (replacing an unconfirmed one); TotpExists when a
        confirmed one is set up."""
        secret, keys, now = totp.new_secret(), self.master_keys(), int(self.clock.now())
        sealed = keys.seal(secret.encode(), totp_purpose(user.id))
        if not await self.db.transaction(repo.put_unconfirmed_totp, user.id, sealed, now):
            raise errors.TotpExists()
        uri = totp.otpauth_uri(secret, user.email)
        return Enrolment(secret, uri, totp.qr_svg(uri))

    async def confirm_totp(self, user: User, code: object, source: audit.Source = audit.NO_SOURCE) -> Confirmed:
        """The first code from the app confirms it; ten recovery codes come with the first factor."""
        self.limiter.check(LIMIT, user.id)
        now, keys = int(self.clock.now()), self.master_keys()

        def work(conn: Connection) -> Confirmed | None:
            found = repo.totp_of(conn, user.id)
            if found is None or found[1] is not None:
                raise errors.TotpNotFound()
            step = totp.matching_step(keys.open(found[0], totp_purpose(user.id)).decode(), _text(code), now)
            if step is None or not repo.use_step(conn, user.id, step, confirm_at=now):
                return None
            return Confirmed(factor_added(conn, keys, user, "totp", now, source=source))
        confirmed = await self.db.transaction(work)
        if confirmed is None:
            self.limiter.hit(LIMIT, user.id)
            raise errors.MfaFailed("The code is wrong; enter the current code from your authenticator app.")
        await self.sessions.learn_now()
        return confirmed

    async def remove_totp(self, signed_in: SignedIn, source: audit.Source = audit.NO_SOURCE) -> None:
        """Needs a recent sign-in; the last factor gone, the recovery codes go too."""
        self.require_recent(signed_in)
        user, now, keys = signed_in.user, int(self.clock.now()), self.master_keys()

        def work(conn: Connection) -> None:
            if not repo.delete_totp(conn, user.id):
                raise errors.TotpNotFound()
            factor_removed(conn, keys, user, "totp", now, source=source)
        await self.db.transaction(work)
        await self.sessions.learn_now()

    # ---- recovery codes --------------------------------------------------------------------------

    async def regenerate_codes(self, signed_in: SignedIn, source: audit.Source = audit.NO_SOURCE) -> list[str]:
        """Ten new codes, the old ones void; only for a user with a second factor."""
        self.require_recent(signed_in)
        user, now, codes = signed_in.user, int(self.clock.now()), recovery_codes.new_codes()

        def work(conn: Connection) -> None:
            if not _has_mfa(conn, user.id):
                raise errors.TotpNotFound("Set up a second factor first: recovery codes come with it.")
            repo.replace_codes(conn, user.id, [recovery_codes.digest(c) for c in codes], now)
            audit.record(conn, now, audit.EventType.RECOVERY_CODES_REGENERATED, audit.Actor.user(user.id),
                         source=source)
        await self.db.transaction(work)
        return codes

    def require_recent(self, signed_in: SignedIn) -> None:
        if signed_in.session.authenticated_at < self.clock.now() - RECENT_SIGN_IN:
            raise errors.ReauthenticationRequired()

    # ---- the second step -------------------------------------------------------------------------

    def _prove(self, conn: Connection, user: User, method: object, code: object, now: int,
               keys: MasterKeys, source: audit.Source = audit.NO_SOURCE) -> bool:
        """Inside the caller's transaction: is `code` a right, unused second step of `method`? It is
        then used up (a TOTP step, or a recovery code with its notice queued). Either way the step
        is in the user's audit log (the caller checked the rate limit first)."""
        if method not in (Method.TOTP, Method.RECOVERY_CODE):
            raise errors.ValidationFailed("method must be totp or recovery_code", field="method")
        proved = self._use(conn, user, method, code, now, keys, source)
        audit.record(conn, now, audit.EventType.SECOND_STEP, audit.Actor.user(user.id), source=source,
                     outcome=audit.Outcome.SUCCESS if proved else audit.Outcome.FAILURE, detail={"method": str(method)})
        return proved

    def _use(self, conn: Connection, user: User, method: object, code: object, now: int, keys: MasterKeys,
             source: audit.Source) -> bool:
        if method == Method.TOTP:
            found = repo.totp_of(conn, user.id)
            if found is None or found[1] is None:
                return False
            step = totp.matching_step(keys.open(found[0], totp_purpose(user.id)).decode(), _text(code), now)
            return step is not None and repo.use_step(conn, user.id, step)
        normal = recovery_codes.normalized(code)
        if normal is None or not repo.use_code(conn, user.id, recovery_codes.digest(normal), now):
            return False
        left = repo.codes_left(conn, user.id)
        outbox.queue(conn, keys, kind=RECOVERY_CODE_USED, recipient=user.email, params={"left": left}, now=now)
        audit.record(conn, now, audit.EventType.RECOVERY_CODE_USED, audit.Actor.user(user.id), source=source,
                     detail={"left": left})
        return True

    async def complete_sign_in(self, mfa_token: object, method: object, code: object, *, kind: str,
                               source: audit.Source = audit.NO_SOURCE) -> NewSession:
        """The second step of a sign-in (POST /api/auth/login/mfa, the sign-in page): the pending
        step's token, used once, and a right code open the session, with `amr` "pwd otp mfa"."""
        if method not in (Method.TOTP, Method.RECOVERY_CODE):
            raise errors.ValidationFailed("method must be totp or recovery_code", field="method")
        now, keys = int(self.clock.now()), self.master_keys()
        pending = await self.db.read(lambda conn: links.find(conn, LinkKind.MFA, mfa_token, now))
        if pending is None or pending.user_id is None:
            raise errors.MfaFailed()
        self.limiter.check(LIMIT, pending.user_id)

        def work(conn: Connection) -> User | None:
            user = users_repo.by_id(conn, pending.user_id or "")
            if user is None or not user.active:
                raise errors.MfaFailed()
            if not self._prove(conn, user, method, code, now, keys, source):
                return None
            if not links_repo.use(conn, pending.token_hash, now):
                raise errors.MfaFailed()  # used meanwhile by a concurrent request
            return user
        user = await self.db.transaction(work)
        if user is None:
            self.limiter.hit(LIMIT, pending.user_id)
            raise errors.MfaFailed()
        ttl = self.settings.user_token_ttl
        token, session = await open_session(self.db, self.clock, user, kind=kind, ttl=ttl, source=source,
                                            amr=AMR_OTP, method=f"password+{method}")
        return NewSession(token, ttl, session.id)

    async def pending_methods(self, mfa_token: object) -> list[str] | None:
        """The methods of a live pending step (the sign-in page shows them again after a wrong
        code), or None when it is unknown, used or expired."""
        now = int(self.clock.now())

        def work(conn: Connection) -> list[str] | None:
            pending = links.find(conn, LinkKind.MFA, mfa_token, now)
            if pending is None or pending.user_id is None:
                return None
            have = repo.methods_of(conn, pending.user_id)
            return [m.value for m in Method if m.value in have]
        return await self.db.read(work)

    async def demand(self, user: User, answer: Mapping[str, Any], source: audit.Source = audit.NO_SOURCE) -> None:
        """recovery.SecondStep: a password reset of a user with a second factor needs a right code
        (contract 18), under the same single-use and rate rules as a sign-in."""
        if not user.mfa:
            return
        method, code = answer.get("method"), answer.get("code")
        if method is None or code is None:
            raise errors.MfaFailed("This account has a second factor: give a code from your authenticator app "
                                   "(method totp) or one of your recovery codes (method recovery_code).")
        if method not in (Method.TOTP, Method.RECOVERY_CODE):
            raise errors.ValidationFailed("method must be totp or recovery_code", field="method")
        self.limiter.check(LIMIT, user.id)
        now, keys = int(self.clock.now()), self.master_keys()
        if not await self.db.transaction(self._prove, user, method, code, now, keys, source):
            self.limiter.hit(LIMIT, user.id)
            raise errors.MfaFailed()

    # ---- operators -------------------------------------------------------------------------------

    async def reset(self, email: str, actor: audit.Actor = audit.OPERATOR) -> FactorsReset:
        """`lbauth users reset-factors`: every factor and recovery code gone, every session ended."""
        user = await self.db.read(users_repo.by_email, normalize_email(email))
        if user is None or user.deleted_at is not None:
            raise errors.UserNotFound()
        now = int(self.clock.now())

        def work(conn: Connection) -> None:
            repo.delete_totp(conn, user.id)
            repo.delete_passkeys(conn, user.id)
            repo.delete_codes(conn, user.id)
            links.void_older(conn, user.id, LinkKind.MFA, now)
            end_all(conn, user.id, now)
            _mfa_changed(conn, user.id, False, now)
            audit.record(conn, now, audit.EventType.FACTORS_RESET, actor, user_id=user.id)
        await self.db.transaction(work)
        await self.sessions.learn_now()
        return FactorsReset(user.id, user.email)

    # ---- notices ---------------------------------------------------------------------------------

    def composers(self) -> dict[str, Composer]:
        return {FACTOR_ADDED: self.compose_added, FACTOR_REMOVED: self.compose_removed,
                RECOVERY_CODE_USED: self.compose_code_used}

    async def compose_added(self, request: MailRequest) -> Letter | None:
        return letter(site=self.site, subject=f"A second factor was added to your account at {self.site}",
                      paragraphs=[f"{_factor_named(request.params).capitalize()} was added to your account: "
                                  "it can now be used to sign in.",
                                  "If this was not you, reset your password and contact the site's operators."])

    async def compose_removed(self, request: MailRequest) -> Letter | None:
        last = "; signing in now needs only your password" if request.params.get("last") else ""
        return letter(site=self.site, subject=f"A second factor was removed from your account at {self.site}",
                      paragraphs=[f"{_factor_named(request.params).capitalize()} was removed from your account{last}.",
                                  "If this was not you, reset your password and contact the site's operators."])

    async def compose_code_used(self, request: MailRequest) -> Letter | None:
        left = int(request.params.get("left", 0))
        return letter(site=self.site, subject=f"A recovery code of your account at {self.site} was used",
                      paragraphs=[f"One of your recovery codes was just used to sign in; {left} are left. "
                                  "Each works only once.",
                                  "If this was not you, reset your password, regenerate your recovery codes and "
                                  "contact the site's operators."])


def factor_added(conn: Connection, keys: MasterKeys, user: User, factor: str, now: int, *,
                 name: str = "", source: audit.Source = audit.NO_SOURCE) -> list[str] | None:
    """Inside the transaction that added a factor: the user now has a second step (`users.mfa`),
    a notice is queued and the event recorded, and ten recovery codes come with their first
    factor (returned, to show once)."""
    codes = None
    if not _has_mfa(conn, user.id):
        codes = recovery_codes.new_codes()
        repo.replace_codes(conn, user.id, [recovery_codes.digest(c) for c in codes], now)
    _mfa_changed(conn, user.id, True, now)
    outbox.queue(conn, keys, kind=FACTOR_ADDED, recipient=user.email, params={"factor": factor, "name": name},
                 now=now)
    audit.record(conn, now, audit.EventType.PASSKEY_ADDED if factor == "passkey" else audit.EventType.TOTP_ADDED,
                 audit.Actor.user(user.id), source=source)
    return codes


def factor_removed(conn: Connection, keys: MasterKeys, user: User, factor: str, now: int, *, name: str = "",
                   source: audit.Source = audit.NO_SOURCE) -> None:
    """Inside the transaction that removed a factor: with the last one gone, the recovery codes go
    too and signing in needs only the password; a notice is queued."""
    last = not repo.has_factor(conn, user.id)
    if last:
        repo.delete_codes(conn, user.id)
        _mfa_changed(conn, user.id, False, now)
    outbox.queue(conn, keys, kind=FACTOR_REMOVED, recipient=user.email,
                 params={"factor": factor, "name": name, "last": last}, now=now)
    audit.record(conn, now, audit.EventType.PASSKEY_REMOVED if factor == "passkey" else audit.EventType.TOTP_REMOVED,
                 audit.Actor.user(user.id), source=source)


def _mfa_changed(conn: Connection, user_id: str, mfa: bool, now: int) -> None:
    repo.set_mfa(conn, user_id, mfa)
    announce_user_changed(conn, user_id, now)  # processes forget the cached user (its `mfa`)
    changes_repo.notify(conn)


def _factor_named(params: Mapping[str, Any]) -> str:
    """How a notice names a factor: "an authenticator app", "a passkey (Phone)"."""
    if params.get("factor") == "passkey":
        return f"a passkey ({params['name']})" if params.get("name") else "a passkey"
    return "an authenticator app"


def _has_mfa(conn: Connection, user_id: str) -> bool:
    user = users_repo.by_id(conn, user_id)
    return user is not None and user.mfa


def _text(code: object) -> str:
    return code.strip().replace(" ", "") if isinstance(code, str) else ""
