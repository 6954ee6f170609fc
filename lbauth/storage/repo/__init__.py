"""Repository functions: plain functions of a SQLAlchemy Connection, one statement or a few each,
taking typed parameters and returning typed records (lbauth.storage.records).

They never commit: the use case that calls them owns the transaction (lbauth.storage.db).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.selectable import ExecutableReturnsRows

from lbauth.storage import Duplicate

Statement = TypeVar("Statement", bound=ExecutableReturnsRows)


def shaped(record: type[Any], statement: Statement) -> Statement:
    """`statement`, checked to select (or return) the record's fields in their order: records are
    built from rows by position (`Record(*row)`), the cheapest conversion on the hot paths."""
    selected = tuple(statement.exported_columns.keys())
    expected = tuple(f.name for f in dataclasses.fields(record))
    if selected != expected:
        raise TypeError(f"{record.__name__} fields {expected} differ from the columns selected {selected}")
    return statement


@contextmanager
def duplicate_refused(what: str) -> Iterator[None]:
    """A unique key's refusal, raised as `Duplicate` (the core knows no SQLAlchemy)."""
    try:
        yield
    except IntegrityError as exc:
        raise Duplicate(what) from exc
