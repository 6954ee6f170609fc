"""SQLite runs the statements it has compiled straight on the DB-API cursor
(lbauth.storage.db.sqlite.LoopConnection): every statement must read and write exactly as through
SQLAlchemy's own execution (rows, types, row counts, errors)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, CursorResult, bindparam, insert, literal_column, select, update
from sqlalchemy import exc as sa_exc

from lbauth.storage.db import SQLiteDatabase
from lbauth.storage.models import apps, grants, subjects, users

_BY_ID = select(users).where(users.c.id == bindparam("p_id"))
_RENAME = update(users).where(users.c.id == bindparam("p_id")).values(name=bindparam("p_name"))
_APP_OF_GRANT = (select(grants.c.id, grants.c.scopes, apps.c.redirect_uris, subjects.c.asu,
                        literal_column("'x'").label("constant"))
                 .join(apps, apps.c.id == grants.c.app_id)
                 .outerjoin(subjects, (subjects.c.app_id == grants.c.app_id) & (subjects.c.user_id == grants.c.user_id))
                 .where(grants.c.user_id == bindparam("p_user")))
_RETURNING = (update(grants).where(grants.c.id == bindparam("p_id"), grants.c.revoked_at.is_(None))
              .values(revoked_at=bindparam("p_now")).returning(grants.c.id, grants.c.scopes))


@pytest.fixture
async def db(tmp_path: Path, sqlite_template: Path) -> AsyncIterator[SQLiteDatabase]:
    path = tmp_path / "lbauth.db"
    path.write_bytes(sqlite_template.read_bytes())
    database = SQLiteDatabase(f"sqlite+aiosqlite:///{path}")
    await database.transaction(_seed)
    try:
        yield database
    finally:
        await database.close()


def _seed(conn: Connection) -> None:
    conn.execute(insert(users), [{"id": f"usr_{i}", "email": f"{i}@example.com", "name": f"N{i}",
                                  "password_hash": "-", "created_at": i} for i in range(3)])
    conn.execute(insert(apps).values(id="app_1", client_id="c1", name="A", owner_id="usr_0", client_secret_hash="h",
                                     redirect_uris=["https://a.example/cb"], scopes=["userinfo", "email"],
                                     webhook_secret_sealed="s", created_at=1, updated_at=1))
    conn.execute(insert(grants).values(id="gnt_1", app_id="app_1", user_id="usr_1", scopes=["userinfo"],
                                       created_at=1, updated_at=1))


async def both(db: SQLiteDatabase, work: Callable[[Connection], Any]) -> tuple[Any, Any]:
    """`work` on the loop's connection (rolled back) and through plain SQLAlchemy (rolled back)."""
    class Undo(Exception):
        pass
    outcome: list[Any] = []

    def fast(conn: Connection) -> None:
        outcome.append(work(conn))
        raise Undo

    with pytest.raises(Undo):
        await db.transaction(fast)
    with db.sync_engine.connect() as conn, conn.begin() as transaction:
        plain = work(conn)
        transaction.rollback()
    return outcome[0], plain


def rows(result: Any) -> list[tuple[tuple[str, ...], tuple[Any, ...]]]:
    return [(tuple(row._mapping.keys()), tuple(row)) for row in result]


@pytest.mark.parametrize("work", [
    lambda c: rows(c.execute(_BY_ID, {"p_id": "usr_1"})),
    lambda c: rows(c.execute(_BY_ID, {"p_id": "usr_1"})) + rows(c.execute(_BY_ID, {"p_id": "usr_2"})),
    lambda c: rows(c.execute(_APP_OF_GRANT, {"p_user": "usr_1"})),
    lambda c: rows(c.execute(_RETURNING, {"p_id": "gnt_1", "p_now": 5})),
    lambda c: (c.execute(_RENAME, {"p_id": "usr_2", "p_name": "M"}).rowcount, rows(c.execute(select(users.c.name)))),
    # Built per call, with literal values: the same compiled form, each call's own values.
    lambda c: [c.execute(select(users.c.email).where(users.c.id == f"usr_{i}")).scalar() for i in range(3)],
    lambda c: c.execute(select(users.c.id).where(users.c.id.in_(["usr_0", "usr_2"])).order_by(users.c.id)).all(),
    lambda c: c.execute(select(grants.c.scopes)).scalars().all(),
    lambda c: c.execute(select(users.c.id).order_by(users.c.id)).mappings().all(),
    lambda c: (c.execute(select(users.c.id).where(users.c.id == "none")).first(),
               c.execute(select(users.c.id).where(users.c.id == "usr_0")).one(),
               c.scalar(select(apps.c.redirect_uris))),
    lambda c: (lambda r: (list(r.keys()), r.first(), r.returns_rows))(c.execute(_BY_ID, {"p_id": "usr_1"})),
    lambda c: c.execute(_RENAME, {"p_id": "usr_1", "p_name": "X"}).returns_rows,
    # Python-side defaults (interest_tags=list): through SQLAlchemy.
    lambda c: (c.execute(insert(users), {"id": "usr_9", "email": "9@example.com", "name": "N", "password_hash": "-",
                                         "created_at": 9}).rowcount,
               rows(c.execute(_BY_ID, {"p_id": "usr_9"}))),
])
async def test_the_loop_connection_reads_and_writes_as_sqlalchemy_does(db: SQLiteDatabase,
                                                                       work: Callable[[Connection], Any]) -> None:
    fast, plain = await both(db, work)
    assert fast == plain


async def test_compiled_statements_skip_sqlalchemy_execution(db: SQLiteDatabase) -> None:
    def kinds(conn: Connection) -> list[bool]:
        return [isinstance(conn.execute(_BY_ID, {"p_id": "usr_1"}), CursorResult) for _ in range(2)]

    assert await db.transaction(kinds) == [False, False]


async def test_errors_are_sqlalchemy_errors(db: SQLiteDatabase) -> None:
    def duplicate(conn: Connection) -> None:
        conn.execute(insert(grants).values(id="gnt_1", app_id="app_1", user_id="usr_2", scopes=[], created_at=1,
                                           updated_at=1))

    with pytest.raises(sa_exc.IntegrityError):
        await db.transaction(duplicate)

    def rows_of_an_update(conn: Connection) -> None:
        conn.execute(_RENAME, {"p_id": "usr_1", "p_name": "X"}).first()

    with pytest.raises(sa_exc.ResourceClosedError):
        await db.transaction(rows_of_an_update)

    def missing_parameter(conn: Connection) -> None:
        conn.execute(_BY_ID, {}).first()

    with pytest.raises(sa_exc.StatementError):
        await db.transaction(missing_parameter)
