"""Second factors (contract 19): a user's TOTP authenticator, their passkeys, and their recovery
codes, by digest."""

from __future__ import annotations

from sqlalchemy import Connection, delete, func, insert, select, update

from lbauth.storage.models import passkeys, recovery_codes, totp_factors, users
from lbauth.storage.records import Passkey
from lbauth.storage.repo import duplicate_refused, shaped


def totp_of(conn: Connection, user_id: str) -> tuple[str, int | None, int] | None:
    """(sealed secret, confirmed_at, last_step) of the user's authenticator, or None."""
    row = conn.execute(select(totp_factors.c.secret_sealed, totp_factors.c.confirmed_at, totp_factors.c.last_step)
                       .where(totp_factors.c.user_id == user_id)).first()
    return (row[0], row[1], row[2]) if row is not None else None


def put_unconfirmed_totp(conn: Connection, user_id: str, secret_sealed: str, now: int) -> bool:
    """Replace an unconfirmed authenticator (or add the first); False when a confirmed one exists."""
    conn.execute(delete(totp_factors).where(totp_factors.c.user_id == user_id, totp_factors.c.confirmed_at.is_(None)))
    if conn.execute(select(totp_factors.c.user_id).where(totp_factors.c.user_id == user_id)).first() is not None:
        return False
    conn.execute(insert(totp_factors).values(user_id=user_id, secret_sealed=secret_sealed, created_at=now,
                                             confirmed_at=None, last_step=0))
    return True


def use_step(conn: Connection, user_id: str, step: int, *, confirm_at: int | None = None) -> bool:
    """Record the time step of an accepted code, only if it is newer than the last one accepted:
    of two concurrent uses of one code only one updates the row (RFC 6238 5.2: no replay).
    `confirm_at` also confirms an unconfirmed authenticator."""
    values: dict[str, object] = {"last_step": step}
    where = [totp_factors.c.user_id == user_id, totp_factors.c.last_step < step]
    if confirm_at is not None:
        values["confirmed_at"] = confirm_at
        where.append(totp_factors.c.confirmed_at.is_(None))
    else:
        where.append(totp_factors.c.confirmed_at.is_not(None))
    return conn.execute(update(totp_factors).where(*where).values(values)).rowcount == 1


def methods_of(conn: Connection, user_id: str) -> set[str]:
    """The second steps the user can take now: "totp" (a confirmed authenticator), "passkey",
    "recovery_code"."""
    found = conn.execute(select(totp_factors.c.user_id).where(totp_factors.c.user_id == user_id,
                                                              totp_factors.c.confirmed_at.is_not(None))).first()
    return (({"totp"} if found is not None else set()) | ({"passkey"} if passkeys_of(conn, user_id) else set())
            | ({"recovery_code"} if codes_left(conn, user_id) else set()))


def has_factor(conn: Connection, user_id: str) -> bool:
    """A confirmed authenticator or a passkey: what `users.mfa` says."""
    return bool(methods_of(conn, user_id) - {"recovery_code"})


def delete_totp(conn: Connection, user_id: str) -> bool:
    return conn.execute(delete(totp_factors).where(totp_factors.c.user_id == user_id)).rowcount > 0


def replace_codes(conn: Connection, user_id: str, code_hashes: list[str], now: int) -> None:
    """The user's recovery codes are these (the old ones void)."""
    delete_codes(conn, user_id)
    if code_hashes:
        conn.execute(insert(recovery_codes), [{"code_hash": h, "user_id": user_id, "created_at": now, "used_at": None}
                                              for h in code_hashes])


def delete_codes(conn: Connection, user_id: str) -> int:
    return conn.execute(delete(recovery_codes).where(recovery_codes.c.user_id == user_id)).rowcount


def use_code(conn: Connection, user_id: str, code_hash: str, now: int) -> bool:
    """Mark an unused code of the user used; False when it is not theirs, unknown or used (a race lost)."""
    return conn.execute(update(recovery_codes)
                        .where(recovery_codes.c.code_hash == code_hash, recovery_codes.c.user_id == user_id,
                               recovery_codes.c.used_at.is_(None))
                        .values(used_at=now)).rowcount == 1


def codes_left(conn: Connection, user_id: str) -> int:
    return int(conn.execute(select(func.count()).select_from(recovery_codes)
                            .where(recovery_codes.c.user_id == user_id, recovery_codes.c.used_at.is_(None)))
               .scalar_one())


def set_mfa(conn: Connection, user_id: str, mfa: bool) -> None:
    conn.execute(update(users).where(users.c.id == user_id).values(mfa=mfa))


def sealed_secrets(conn: Connection) -> list[tuple[str, str]]:
    """(user id, sealed secret) of every authenticator: master key rotation."""
    return [(user_id, sealed) for user_id, sealed in
            conn.execute(select(totp_factors.c.user_id, totp_factors.c.secret_sealed))]


def reseal_secret(conn: Connection, user_id: str, sealed: str) -> None:
    conn.execute(update(totp_factors).where(totp_factors.c.user_id == user_id).values(secret_sealed=sealed))


# ---- passkeys ----------------------------------------------------------------------------------

_PASSKEY = shaped(Passkey, select(*passkeys.c))


def add_passkey(conn: Connection, passkey: Passkey) -> None:
    """Duplicate when the credential is registered already (to anyone)."""
    with duplicate_refused("passkey"):
        conn.execute(insert(passkeys).values(**{f: getattr(passkey, f) for f in Passkey.__dataclass_fields__}))


def passkeys_of(conn: Connection, user_id: str) -> list[Passkey]:
    """The user's passkeys, oldest first."""
    return [Passkey(*row) for row in
            conn.execute(_PASSKEY.where(passkeys.c.user_id == user_id).order_by(passkeys.c.created_at, passkeys.c.id))]


def passkey_by_credential(conn: Connection, credential_id: str) -> Passkey | None:
    row = conn.execute(_PASSKEY.where(passkeys.c.credential_id == credential_id)).first()
    return Passkey(*row) if row is not None else None


def use_passkey(conn: Connection, passkey: Passkey, sign_count: int, backed_up: bool, now: int) -> bool:
    """Record a sign-in with the passkey: its new counter and backup state. Only if the counter is
    still the one read, so of two concurrent uses of one signature only one passes (WebAuthn 7.2
    step 22: a counter that does not grow may be a cloned authenticator)."""
    return conn.execute(update(passkeys)
                        .where(passkeys.c.id == passkey.id, passkeys.c.sign_count == passkey.sign_count)
                        .values(sign_count=sign_count, backed_up=backed_up, last_used_at=now)).rowcount == 1


def delete_passkey(conn: Connection, user_id: str, passkey_id: str) -> bool:
    return conn.execute(delete(passkeys).where(passkeys.c.id == passkey_id,
                                               passkeys.c.user_id == user_id)).rowcount > 0


def delete_passkeys(conn: Connection, user_id: str) -> int:
    return conn.execute(delete(passkeys).where(passkeys.c.user_id == user_id)).rowcount
