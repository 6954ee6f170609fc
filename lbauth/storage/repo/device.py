"""Device authorizations (RFC 8628), by the digests of their device code and user code, and the
refresh token a redeemed one stores."""

from __future__ import annotations

from sqlalchemy import BigInteger, Connection, String, bindparam, delete, insert, select, update
from sqlalchemy.sql.elements import ColumnElement

from lbauth.storage.models import device_codes as device
from lbauth.storage.models import refresh_tokens
from lbauth.storage.records import Authentication, DeviceCode
from lbauth.storage.repo import duplicate_refused, shaped

_ALL = shaped(DeviceCode, select(device))


def _pending(user_code_hash: str, now: int) -> tuple[ColumnElement[bool], ...]:
    """Neither approved nor denied, and not expired: what the user may still answer."""
    return (device.c.user_code_hash == user_code_hash, device.c.approved_at.is_(None), device.c.denied_at.is_(None),
            device.c.expires_at > now)


def insert_request(conn: Connection, *, device_code_hash: str, user_code_hash: str, app_id: str, scopes: list[str],
                   resources: list[str], now: int, expires_at: int, interval: int) -> None:
    """Raises Duplicate when another request holds the same user code (drawn again)."""
    with duplicate_refused("user code"):
        conn.execute(insert(device).values(device_code_hash=device_code_hash, user_code_hash=user_code_hash,
                                           app_id=app_id, scopes=scopes, resources=resources, created_at=now,
                                           expires_at=expires_at, interval=interval))


def pending(conn: Connection, user_code_hash: str, now: int) -> DeviceCode | None:
    row = conn.execute(_ALL.where(*_pending(user_code_hash, now))).first()
    return DeviceCode(*row) if row is not None else None


def approve(conn: Connection, user_code_hash: str, now: int, *, user_id: str, grant_id: str, asu: str,
            authentication: Authentication, session_id: str | None, id_token_alg: str | None) -> bool:
    """The user's approval, with what the tokens will be issued for; False when the request was
    answered or expired meanwhile."""
    return conn.execute(update(device).where(*_pending(user_code_hash, now))
                        .values(approved_at=now, user_id=user_id, grant_id=grant_id, asu=asu,
                                auth_time=authentication.auth_time, amr=authentication.amr, session_id=session_id,
                                id_token_alg=id_token_alg)).rowcount == 1


def deny(conn: Connection, user_code_hash: str, now: int) -> bool:
    return conn.execute(update(device).where(*_pending(user_code_hash, now)).values(denied_at=now)).rowcount == 1


# Built once (see repo/codes.py); bind parameters named p_*, apart from the columns SET.
_NOW = bindparam("p_now", type_=BigInteger)
_CLAIM = shaped(DeviceCode, update(device)
                .where(device.c.device_code_hash == bindparam("p_device_code_hash", type_=String),
                       device.c.app_id == bindparam("p_app_id", type_=String), device.c.approved_at.is_not(None),
                       device.c.denied_at.is_(None), device.c.used_at.is_(None), device.c.expires_at > _NOW)
                .values(used_at=_NOW)
                .returning(*device.c))


def redeem(conn: Connection, *, device_code_hash: str, app_id: str, now: int, refresh_hash: str,
           refresh_expires_at: int, refresh_jkt: str | None) -> DeviceCode | None:
    """Claim the app's approved, unused, unexpired device code and store its refresh token: one
    conditional UPDATE decides between concurrent polls (RFC 8628 3.5: tokens once); None, having
    changed nothing, otherwise."""
    row = conn.execute(_CLAIM, {"p_device_code_hash": device_code_hash, "p_app_id": app_id, "p_now": now}).first()
    if row is None:
        return None
    claimed = DeviceCode(*row)
    assert claimed.user_id is not None and claimed.grant_id is not None and claimed.asu is not None
    conn.execute(insert(refresh_tokens).values(
        token_hash=refresh_hash, app_id=app_id, user_id=claimed.user_id, grant_id=claimed.grant_id, asu=claimed.asu,
        scopes=claimed.scopes, created_at=now, expires_at=refresh_expires_at, auth_time=claimed.auth_time,
        session_id=claimed.session_id, resources=claimed.resources, amr=claimed.amr or "pwd", dpop_jkt=refresh_jkt))
    return claimed


def of_app(conn: Connection, device_code_hash: str, app_id: str) -> DeviceCode | None:
    """The app's device code in whatever state (another app's is None)."""
    row = conn.execute(_ALL.where(device.c.device_code_hash == device_code_hash, device.c.app_id == app_id)).first()
    return DeviceCode(*row) if row is not None else None


def polled(conn: Connection, device_code_hash: str, now: int, interval: int) -> None:
    """A poll of a pending request: when it came, and the interval from now on."""
    conn.execute(update(device).where(device.c.device_code_hash == device_code_hash)
                 .values(last_polled_at=now, interval=interval))


def deny_for_grant(conn: Connection, grant_id: str, now: int) -> None:
    """Approved under a grant being revoked or suspended, and not yet redeemed: never redeemed."""
    conn.execute(update(device).where(device.c.grant_id == grant_id, device.c.used_at.is_(None),
                                      device.c.denied_at.is_(None)).values(denied_at=now))


def delete_ended(conn: Connection, before: int) -> int:
    return conn.execute(delete(device).where(device.c.expires_at < before)).rowcount
