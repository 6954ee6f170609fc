"""Storage: the engine and transactions (db), the schema (models), typed records (records),
repository functions (repo), and Alembic migrations (migrate, migrations/).

The core sees SQLAlchemy through two names only: `Connection`, the argument of a unit of work,
and `Duplicate`, what an insert that a concurrent writer beat raises.
"""

from sqlalchemy import Connection


class Duplicate(Exception):
    """An insert refused by a unique key: another transaction stored the same row first."""


__all__ = ["Connection", "Duplicate"]
