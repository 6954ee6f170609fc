"""Passkeys (WebAuthn Level 3, contract 19), with the `webauthn` package: adding one to an account,
signing in with one (no email: the browser offers the site's passkeys, usernameless), and a
passkey as the second step after a password.

Each ceremony's challenge is a single-use link token (`lba_pk_`, 5 minutes) stored by digest. The
browser signs it inside `clientDataJSON`, so an answer names its own challenge, which is used up in
the transaction that checks the answer, right or wrong. The package does not check `userHandle`
(WebAuthn 7.2 step 6): the passkey is found by its credential id, and the handle the authenticator
returns must be its user's. User verification is required in every ceremony.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from webauthn import (
    generate_authentication_options,
    generate_registration_options,
    options_to_json,
    verify_authentication_response,
    verify_registration_response,
)
from webauthn.helpers import base64url_to_bytes, bytes_to_base64url, parse_authentication_credential_json
from webauthn.helpers.exceptions import WebAuthnException
from webauthn.helpers.structs import (
    AuthenticationCredential,
    AuthenticatorSelectionCriteria,
    CredentialDeviceType,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from lbauth import errors
from lbauth.clock import Clock
from lbauth.core import audit
from lbauth.core.accounts import links
from lbauth.core.accounts.accounts import NewSession
from lbauth.core.accounts.links import LinkKind
from lbauth.core.accounts.sessions import SignedIn, open_session
from lbauth.core.crypto import opaque
from lbauth.core.crypto.masterkey import MasterKeys
from lbauth.core.factors.factors import LIMIT, Factors, factor_added, factor_removed
from lbauth.settings import Settings
from lbauth.storage import Connection, Duplicate
from lbauth.storage.db import Database
from lbauth.storage.records import Passkey, User
from lbauth.storage.repo import factors as repo
from lbauth.storage.repo import links as links_repo
from lbauth.storage.repo import users as users_repo

TIMEOUT_MS = links.KINDS[LinkKind.PASSKEY].lifetime * 1000
MAX_NAME = 100
# What the browser's answer may fail on, besides the package's own errors: it is untrusted JSON.
_MALFORMED = (WebAuthnException, ValueError, TypeError, KeyError, AttributeError, IndexError)


@dataclass(frozen=True)
class PasskeyAdded:
    passkey: Passkey
    recovery_codes: list[str] | None  # shown once: only when this is the user's first factor


def key_method(passkey: Passkey) -> str:
    """RFC 8176 2: `swk` for a passkey that may be synced to other devices (backup eligible), a
    software-secured key; `hwk` for one bound to its authenticator."""
    return "swk" if passkey.backup_eligible else "hwk"


class Passkeys:
    """The WebAuthn ceremonies. The relying party is the auth URL's origin and its host (or
    `LBAUTH_WEBAUTHN_RP_ID`, a domain that host is under)."""

    def __init__(self, db: Database, clock: Clock, settings: Settings, master_keys: Callable[[], MasterKeys],
                 factors: Factors) -> None:
        self.db, self.clock, self.settings, self.master_keys, self.factors = db, clock, settings, master_keys, factors
        parts = urlsplit(settings.auth_url)
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.rp_id = settings.webauthn_rp_id
        self.rp_name = parts.hostname or self.rp_id

    # ---- adding one (a signed-in user, at /account/security) -------------------------------------

    async def registration_options(self, user: User) -> str:
        """PublicKeyCredentialCreationOptions as JSON (WebAuthn 5.4): a resident key with user
        verification, none of the user's passkeys again."""
        now = int(self.clock.now())

        def work(conn: Connection) -> tuple[str, list[Passkey]]:
            token = links.issue(conn, LinkKind.PASSKEY_ADD, email=user.email, user_id=user.id, now=now)
            return token, repo.passkeys_of(conn, user.id)
        token, existing = await self.db.transaction(work)
        options = generate_registration_options(
            rp_id=self.rp_id, rp_name=self.rp_name, user_id=user.id.encode(), user_name=user.email,
            user_display_name=user.name or user.email, challenge=token.encode(), timeout=TIMEOUT_MS,
            authenticator_selection=AuthenticatorSelectionCriteria(
                resident_key=ResidentKeyRequirement.REQUIRED, user_verification=UserVerificationRequirement.REQUIRED),
            exclude_credentials=[PublicKeyCredentialDescriptor(id=base64url_to_bytes(p.credential_id))
                                 for p in existing])
        return options_to_json(options)

    async def add(self, user: User, credential: object, name: object,
                  source: audit.Source = audit.NO_SOURCE) -> PasskeyAdded:
        """Verify the browser's answer to `registration_options` (WebAuthn 7.1) and keep the passkey;
        ten recovery codes come with the user's first factor."""
        label = _name(name)
        token = _challenge(credential, "webauthn.create")
        verified = None
        if isinstance(credential, dict) and token is not None:
            try:
                verified = verify_registration_response(
                    credential=credential, expected_challenge=token.encode(), expected_rp_id=self.rp_id,
                    expected_origin=self.origin, require_user_verification=True)
            except _MALFORMED:
                pass
        now, keys = int(self.clock.now()), self.master_keys()

        def work(conn: Connection) -> PasskeyAdded | None:
            challenge = links.take(conn, LinkKind.PASSKEY_ADD, token, now)
            if challenge is None or challenge.user_id != user.id or verified is None:
                return None
            label_or_number = label or f"Passkey {len(repo.passkeys_of(conn, user.id)) + 1}"
            passkey = Passkey(
                id=opaque.new_id("pk_"), user_id=user.id, credential_id=bytes_to_base64url(verified.credential_id),
                public_key=bytes_to_base64url(verified.credential_public_key), sign_count=verified.sign_count,
                backup_eligible=verified.credential_device_type == CredentialDeviceType.MULTI_DEVICE,
                backed_up=verified.credential_backed_up, name=label_or_number,
                created_at=now, last_used_at=None)
            repo.add_passkey(conn, passkey)
            codes = factor_added(conn, keys, user, "passkey", now, name=passkey.name, source=source)
            return PasskeyAdded(passkey, codes)
        try:
            added = await self.db.transaction(work)
        except Duplicate:
            raise errors.PasskeyRefused("This passkey is registered already.") from None
        if added is None:
            raise errors.PasskeyRefused()
        await self.factors.sessions.learn_now()
        return added

    async def remove(self, signed_in: SignedIn, passkey_id: object, source: audit.Source = audit.NO_SOURCE) -> None:
        """Needs a recent sign-in; the last factor gone, the recovery codes go too."""
        self.factors.require_recent(signed_in)
        user, now, keys = signed_in.user, int(self.clock.now()), self.master_keys()

        def work(conn: Connection) -> None:
            found = [p for p in repo.passkeys_of(conn, user.id) if p.id == passkey_id]
            if not found or not repo.delete_passkey(conn, user.id, found[0].id):
                raise errors.PasskeyNotFound()
            factor_removed(conn, keys, user, "passkey", now, name=found[0].name, source=source)
        await self.db.transaction(work)
        await self.factors.sessions.learn_now()

    # ---- signing in with one, no email or password -----------------------------------------------

    async def sign_in_options(self, signed_in: User | None = None) -> str:
        """PublicKeyCredentialRequestOptions as JSON, for any of the site's passkeys (no
        `allowCredentials`: the browser lists the ones it holds, or offers them as autofill). With a
        user `signed_in` already (signing in again: `acr_values=phr`, `prompt=login`), only theirs:
        signing in again never switches to another account's passkey."""
        now = int(self.clock.now())

        def work(conn: Connection) -> tuple[str, list[Passkey]]:
            user_id = signed_in.id if signed_in is not None else None
            token = links.issue(conn, LinkKind.PASSKEY, email="", user_id=user_id, now=now)
            return token, repo.passkeys_of(conn, user_id) if user_id is not None else []
        return self._request_options(*await self.db.transaction(work))

    async def sign_in(self, credential: object, *, kind: str, signed_in: User | None = None,
                      source: audit.Source = audit.NO_SOURCE) -> NewSession:
        """A passkey sign-in is complete (contract 19): `amr` "hwk|swk user mfa", `acr` phr; by the
        `signed_in` user's own passkey when there is one (`sign_in_options`). Any failure is the
        sign-in's usual LoginFailed, which says nothing of the account."""
        now = int(self.clock.now())
        for_user = signed_in.id if signed_in is not None else None

        def work(conn: Connection) -> tuple[User, Passkey] | None:
            return self._assert(conn, credential, now, for_user=for_user)
        found = await self.db.transaction(work)
        if found is None:
            raise errors.LoginFailed("That passkey was not accepted. Try again, or sign in with your email and "
                                     "password.")
        user, passkey = found
        ttl = self.settings.user_token_ttl
        token, session = await open_session(self.db, self.clock, user, kind=kind, ttl=ttl, source=source,
                                            amr=f"{key_method(passkey)} user mfa", method="passkey")
        return NewSession(token, ttl, session.id)

    # ---- a passkey as the second step after a password -------------------------------------------

    async def second_step_options(self, mfa_token: object) -> str:
        """Request options for the passkeys of the user whose pending step `mfa_token` is."""
        now = int(self.clock.now())

        def work(conn: Connection) -> tuple[str, list[Passkey]] | None:
            pending = links.find(conn, LinkKind.MFA, mfa_token, now)
            if pending is None or pending.user_id is None:
                return None
            token = links.issue(conn, LinkKind.PASSKEY, email="", user_id=pending.user_id, now=now)
            return token, repo.passkeys_of(conn, pending.user_id)
        found = await self.db.transaction(work)
        if found is None or not found[1]:
            raise errors.MfaFailed()
        return self._request_options(*found)

    async def complete_second_step(self, mfa_token: object, credential: object, *, kind: str,
                                   source: audit.Source = audit.NO_SOURCE) -> NewSession:
        """The pending step's token, used once, and an assertion of one of the user's passkeys open
        the session, with `amr` "pwd hwk|swk mfa"; failures count towards the account's limit."""
        now = int(self.clock.now())
        pending = await self.db.read(lambda conn: links.find(conn, LinkKind.MFA, mfa_token, now))
        if pending is None or pending.user_id is None:
            raise errors.MfaFailed()
        user_id = pending.user_id
        self.factors.limiter.check(LIMIT, user_id)

        def work(conn: Connection) -> tuple[User, Passkey] | None:
            found = self._assert(conn, credential, now, for_user=user_id)
            if found is not None and not links_repo.use(conn, pending.token_hash, now):
                found = None  # used meanwhile by a concurrent request
            audit.record(conn, now, audit.EventType.SECOND_STEP, audit.Actor.user(user_id), source=source,
                         outcome=audit.Outcome.FAILURE if found is None else audit.Outcome.SUCCESS,
                         detail={"method": "passkey"})
            return found
        found = await self.db.transaction(work)
        if found is None:
            self.factors.limiter.hit(LIMIT, user_id)
            raise errors.MfaFailed("That passkey was not accepted; try again, or use another way.")
        user, passkey = found
        ttl = self.settings.user_token_ttl
        token, session = await open_session(self.db, self.clock, user, kind=kind, ttl=ttl, source=source,
                                            amr=f"pwd {key_method(passkey)} mfa", method="password+passkey")
        return NewSession(token, ttl, session.id)

    # ---- the assertion (WebAuthn 7.2) -------------------------------------------------------------

    def _request_options(self, token: str, allowed: list[Passkey]) -> str:
        options = generate_authentication_options(
            rp_id=self.rp_id, challenge=token.encode(), timeout=TIMEOUT_MS,
            allow_credentials=[PublicKeyCredentialDescriptor(id=base64url_to_bytes(p.credential_id)) for p in allowed],
            user_verification=UserVerificationRequirement.REQUIRED)
        return options_to_json(options)

    def _assert(self, conn: Connection, credential: object, now: int, *, for_user: str | None
                ) -> tuple[User, Passkey] | None:
        """Inside the caller's transaction: the user and passkey a right assertion proves, or None.
        Its challenge is used up either way (it must be a live one, issued for `for_user`, or for
        anyone when None); the passkey's counter moves on."""
        parsed = _parsed(credential)
        token = _challenge(credential, "webauthn.get")
        challenge = links.take(conn, LinkKind.PASSKEY, token, now)
        if parsed is None or challenge is None or challenge.user_id != for_user:
            return None
        passkey = repo.passkey_by_credential(conn, parsed.id)
        if passkey is None or (for_user is not None and passkey.user_id != for_user):
            return None
        user = users_repo.by_id(conn, passkey.user_id)
        if user is None or not user.active:
            return None
        handle = parsed.response.user_handle
        if (handle is None and for_user is None) or (
                handle is not None and not hmac.compare_digest(handle, user.id.encode())):
            return None  # WebAuthn 7.2 step 6: the authenticator's account must be the passkey's
        try:
            verified = verify_authentication_response(
                credential=parsed, expected_challenge=(token or "").encode(), expected_rp_id=self.rp_id,
                expected_origin=self.origin, credential_public_key=base64url_to_bytes(passkey.public_key),
                credential_current_sign_count=passkey.sign_count, require_user_verification=True)
        except _MALFORMED:
            return None
        if not repo.use_passkey(conn, passkey, verified.new_sign_count, verified.credential_backed_up, now):
            return None
        return user, passkey


def _parsed(credential: object) -> AuthenticationCredential | None:
    if not isinstance(credential, dict):
        return None
    try:
        return parse_authentication_credential_json(credential)
    except _MALFORMED:
        return None


def _challenge(credential: object, ceremony: str) -> str | None:
    """The challenge the browser signed (`clientDataJSON.challenge`, base64url), as the link token
    it was issued as; None when the answer is not of this ceremony or is malformed."""
    try:
        client_data = json.loads(base64url_to_bytes(credential["response"]["clientDataJSON"]))  # type: ignore[index]
        if client_data.get("type") != ceremony:
            return None
        token = base64url_to_bytes(client_data["challenge"]).decode("ascii")
    except (*_MALFORMED, UnicodeDecodeError):
        return None
    return token if opaque.has_prefix(token, opaque.PASSKEY_CHALLENGE) else None


def _name(name: object) -> str:
    """The name the user gives a passkey, to recognise it ("Phone", "YubiKey"); empty: numbered."""
    if name is None:
        return ""
    if not isinstance(name, str) or len(name.strip()) > MAX_NAME:
        raise errors.ValidationFailed(f"name must be text of at most {MAX_NAME} characters", field="name")
    return name.strip()


