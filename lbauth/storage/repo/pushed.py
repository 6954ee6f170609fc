"""Pushed authorization requests (RFC 9126), by the digest of their `request_uri`."""

from __future__ import annotations

from sqlalchemy import Connection, case, delete, func, insert, update

from lbauth.storage.models import pushed_requests as pushed


def insert_request(conn: Connection, *, request_hash: str, app_id: str, parameters: dict[str, list[str]], now: int,
                   expires_at: int) -> None:
    conn.execute(insert(pushed).values(request_hash=request_hash, app_id=app_id, parameters=parameters,
                                       created_at=now, expires_at=expires_at))


def open_request(conn: Connection, request_hash: str, app_id: str, now: int,
                 interaction_expires_at: int) -> dict[str, list[str]] | None:
    """The parameters of the app's live request (not expired, not spent), or None. Its first use
    moves its end to `interaction_expires_at`, once: the user may take that long to sign in."""
    live = (pushed.c.request_hash == request_hash, pushed.c.app_id == app_id, pushed.c.completed_at.is_(None),
            pushed.c.expires_at >= now)
    row = conn.execute(update(pushed).where(*live)
                       .values(expires_at=case((pushed.c.first_used_at.is_(None), interaction_expires_at),
                                               else_=pushed.c.expires_at),
                               first_used_at=func.coalesce(pushed.c.first_used_at, now))
                       .returning(pushed.c.parameters)).first()
    return row[0] if row is not None else None


def keep_parameters(conn: Connection, request_hash: str, parameters: dict[str, list[str]]) -> None:
    """The parameters the request resumes with after a page (a sign-in, an account choice)."""
    conn.execute(update(pushed).where(pushed.c.request_hash == request_hash, pushed.c.completed_at.is_(None))
                 .values(parameters=parameters))


def complete(conn: Connection, request_hash: str, now: int) -> bool:
    """Spend the request; False when it was spent (or had ended) meanwhile: a race lost."""
    return conn.execute(update(pushed).where(pushed.c.request_hash == request_hash, pushed.c.completed_at.is_(None),
                                             pushed.c.expires_at >= now)
                        .values(completed_at=now)).rowcount == 1


def delete_ended(conn: Connection, before: int) -> int:
    return conn.execute(delete(pushed).where(pushed.c.expires_at < before)).rowcount
