"""What both databases share: units of work, committing then raising, and what an unreachable
database looks like (contract section 3; docs/architecture.md, "Storage")."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Connection, text
from sqlalchemy import exc as sa_exc

from lbauth.errors import LbauthError, ServerUnavailable

T = TypeVar("T")

RETRY_AFTER_SECONDS = 5
READY_TIMEOUT_SECONDS = 0.9  # /readyz and /metrics: "not ready" rather than a slow answer


class CommitThenRaise(Exception):  # noqa: N818 - named for what the database does with it
    """Raised by a unit of work: commit what it did, then raise `error` to the caller. For an
    error whose side effects must stand, such as a replayed code revoking its tokens (RFC 6749 4.1.2)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


class _Deferred:
    """The error of a CommitThenRaise, carried out of the unit of work past its commit."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def run_unit(conn: Connection, work: Callable[..., T], args: tuple) -> T:
    """`work(conn, *args)`, with a CommitThenRaise turned into a value that `outcome` raises after
    the commit."""
    try:
        return work(conn, *args)
    except CommitThenRaise as deferred:
        return _Deferred(deferred.error)  # type: ignore[return-value]


def outcome(result: T) -> T:
    """After the commit: the unit's result, or the error it deferred."""
    if isinstance(result, _Deferred):
        raise result.error
    return result


def is_connection_lost(exc: BaseException) -> bool:
    """True when `exc` is a connection that broke under a unit of work (reset, closed, lost)."""
    if isinstance(exc, sa_exc.DBAPIError):
        return exc.connection_invalidated
    return isinstance(exc, OSError | ConnectionError)


def is_unavailable(exc: BaseException) -> bool:
    """True when `exc` means the database cannot be reached, not that the request was wrong."""
    if isinstance(exc, sa_exc.DBAPIError):
        return exc.connection_invalidated or isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError)
    return isinstance(exc, OSError | TimeoutError | sa_exc.TimeoutError | ConnectionError)


def unavailable() -> LbauthError:
    """503 with Retry-After (contract section 3)."""
    return ServerUnavailable(headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


def select_one(conn: Connection) -> object:
    return conn.execute(text("SELECT 1")).scalar()


def counts_statements(statement: str) -> bool:
    """SQL statements sent, for the statement budgets and `make bench`: transaction control aside."""
    return not statement.startswith(("BEGIN", "COMMIT", "ROLLBACK"))

