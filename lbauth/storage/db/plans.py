"""Statements sent straight to the driver once SQLAlchemy has compiled them, with SQLAlchemy's
own bind and result processors: SQLAlchemy's execution layer costs several times what the database
takes to run a small statement (docs/performance.md). Each database's connection says how a
statement is sent (`PlannedConnection.send`): a DB-API cursor on SQLite, a prepared asyncpg
statement on PostgreSQL. Anything a plan cannot run goes through SQLAlchemy, on the same
connection."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import IteratorResult, Row
from sqlalchemy.engine.result import SimpleResultMetaData
from sqlalchemy.sql import compiler
from sqlalchemy.sql.elements import ClauseElement

_PLANS_MAX = 1_000  # compiled statements remembered per database (SQLAlchemy's own cache holds 500)
# While tracing is on (lbauth/otel.py sets it): `statement_span(connection, plan)`, a context manager
# around the statement's send, its database span. None (tracing off) costs one comparison.
statement_span: Callable[[PlannedConnection, Plan], AbstractContextManager[object]] | None = None


class Plans:
    """The plans of one database's statements, shared by its connections: a PostgreSQL unit of
    work gets a new `Connection` each time, and a plan is worth making only once."""

    def __init__(self) -> None:
        self.by_compiled: dict[int, Plan | None] = {}  # id(compiled) -> its plan, None when not ours to run
        self.constants: dict[int, tuple[Any, tuple[str, ...], Plan]] = {}  # id(statement) -> plan


class PlannedConnection(Connection):
    """A SQLAlchemy `Connection` whose `execute` runs a compiled statement's plan through `send`;
    anything else (DDL, textual SQL, Python-side defaults, execution options) through SQLAlchemy."""

    def __init__(self, engine: Engine, database: Any) -> None:
        """`database`: its `plans`, and its `statements` counter, which counts what plans send."""
        super().__init__(engine)
        self._database = database
        self._plans: dict[int, Plan | None] = database.plans.by_compiled
        self._constants: dict[int, tuple[Any, tuple[str, ...], Plan]] = database.plans.constants

    def send(self, plan: Plan, values: list) -> tuple[list, int]:
        """Run the plan's SQL with these positional values: its rows (empty when it returns
        none) and its row count. Raises SQLAlchemy's own DBAPIError subclasses."""
        raise NotImplementedError

    def execute(self, statement: Any, parameters: Any = None, *, execution_options: Any = None) -> Any:
        if execution_options is None and (parameters is None or type(parameters) is dict):
            keys = tuple(sorted(parameters)) if parameters else ()
            known = self._constants.get(id(statement))
            try:
                if known is not None and known[0] is statement and known[1] == keys:
                    return known[2].run(self, known[2].values(parameters))
                plan, values = self._plan(statement, parameters, keys)
                if plan is not None:
                    return plan.run(self, values)
            except _Unbound:
                pass
        return super().execute(statement, parameters, execution_options=execution_options)

    def scalar(self, statement: Any, parameters: Any = None, *, execution_options: Any = None) -> Any:
        return self.execute(statement, parameters, execution_options=execution_options).scalar()

    def scalars(self, statement: Any, parameters: Any = None, *, execution_options: Any = None) -> Any:
        return self.execute(statement, parameters, execution_options=execution_options).scalars()

    def _plan(self, statement: Any, parameters: Mapping[str, Any] | None,
              keys: tuple[str, ...]) -> tuple[Plan | None, list]:
        """The statement's plan and its parameters, or (None, []) for SQLAlchemy to run it."""
        if (getattr(type(statement), "_execute_on_connection", None) is not _CLAUSE_EXECUTION
                or self._execution_options or self.engine._compiled_cache is None):
            return None, []  # DDL, functions, lambdas: as SQLAlchemy runs them
        compiled, extracted, param_dict, _ = statement._compile_w_cache(
            dialect=self.dialect, compiled_cache=self.engine._compiled_cache, column_keys=list(keys),
            for_executemany=False, schema_translate_map=None,
            linting=self.dialect.compiler_linting | compiler.WARN_LINTING)
        known = self._plans.get(id(compiled), _UNKNOWN)
        if known is _UNKNOWN or (known is not None and known.compiled is not compiled):
            if len(self._plans) >= _PLANS_MAX:
                self._plans.clear()
                self._constants.clear()
            known = self._plans[id(compiled)] = Plan.of(compiled, self.dialect)
        if known is None:
            return None, []
        plan: Plan = known
        if not param_dict and compiled.cache_key is not None and extracted is compiled.cache_key.bindparams:
            # The very statement that was compiled, as a module-level statement is: its values are
            # known, and next time it is found by identity.
            self._constants[id(statement)] = (statement, keys, plan)
            return plan, plan.values(parameters)
        try:
            constructed = compiled.construct_params(parameters, extracted_parameters=extracted, escape_names=False,
                                                    _collected_params=param_dict)
        except sa_exc.InvalidRequestError as missing:
            raise _Unbound from missing
        return plan, [process(constructed[name]) if process else constructed[name]
                      for name, _, _, process in plan.slots]


_REQUIRED = object()
_UNKNOWN: Any = object()


class _Unbound(Exception):
    """A parameter without a value."""


_CLAUSE_EXECUTION = ClauseElement._execute_on_connection


class Plan:
    """A compiled statement as the DB-API runs it: its SQL, where each parameter comes from, and
    how its rows read (SQLAlchemy's result processors)."""

    __slots__ = ("compiled", "sql", "slots", "metadata", "row")

    def __init__(self, compiled: Any, slots: list[tuple[str, str, Any, Any]],
                 metadata: SimpleResultMetaData | None, processors: list | None) -> None:
        self.compiled, self.sql, self.slots, self.metadata = compiled, compiled.string, slots, metadata
        if metadata is not None:
            self.row = functools.partial(Row, metadata, processors, metadata._key_to_index)

    @classmethod
    def of(cls, compiled: Any, dialect: Any) -> Plan | None:
        """The plan, or None when the statement needs more of SQLAlchemy than parameters and rows:
        Python-side defaults, expanding IN lists, implicit RETURNING, textual SQL."""
        if (not compiled.positional or compiled.isplaintext or compiled.insert_prefetch or compiled.update_prefetch
                or compiled.literal_execute_params or compiled.post_compile_params or compiled.implicit_returning
                or compiled.schema_translate_map or compiled.for_executemany or compiled._render_postcompile
                or compiled._collect_params or compiled.cache_key is None):
            return None
        if compiled._result_columns and (not compiled._ordered_columns or compiled._textual_ordered_columns
                                         or compiled._ad_hoc_textual or compiled._loose_column_name_matching):
            return None
        binds = {name: bind for bind, name in compiled.bind_names.items()}
        processors = compiled._bind_processors
        slots = []
        for name in compiled.positiontup:
            bind = binds[name]
            if bind.callable:
                return None  # a value computed at each execution
            slots.append((name, bind.key, _REQUIRED if bind.required else bind.value, processors.get(name)))
        metadata, processors = None, None
        if compiled._result_columns:
            columns = compiled._result_columns
            processors = [column.type._cached_result_processor(dialect, None) for column in columns]
            metadata = SimpleResultMetaData([column.keyname for column in columns], _processors=processors)
            if not any(processors):
                processors = None
        return cls(compiled, slots, metadata, processors)

    def values(self, parameters: Mapping[str, Any] | None) -> list:
        """The positional parameters: those given (by key or compiled name), else the statement's own."""
        given = parameters or {}
        values = []
        for name, key, own, process in self.slots:
            if key in given:
                value = given[key]
            elif name in given:
                value = given[name]
            elif own is _REQUIRED:
                raise _Unbound(key)  # SQLAlchemy runs it, and says which value is missing
            else:
                value = own
            values.append(process(value) if process else value)
        return values

    def run(self, conn: PlannedConnection, values: list) -> _Result:
        conn._database.statements += 1
        if statement_span is None:
            rows, count = conn.send(self, values)
        else:
            with statement_span(conn, self):
                rows, count = conn.send(self, values)
        return _Result(self, rows, count)


class _Result:
    """Rows already fetched, read as SQLAlchemy's own results are: `first`, `one`, `scalar`, `all`
    and iteration here, anything else through SQLAlchemy's IteratorResult over the same rows.
    The rows are SQLAlchemy `Row` objects."""

    __slots__ = ("_plan", "_rows", "rowcount")

    def __init__(self, plan: Plan, rows: list, rowcount: int) -> None:
        self._plan, self._rows, self.rowcount = plan, rows, rowcount

    def _take(self) -> list:
        if self._plan.metadata is None:
            raise sa_exc.ResourceClosedError("This result object does not return rows. "
                                             "It has been closed automatically.")
        rows, self._rows = self._rows, []
        return rows

    def first(self) -> Row | None:
        rows = self._take()
        return self._plan.row(rows[0]) if rows else None

    def one_or_none(self) -> Row | None:
        rows = self._take()
        if len(rows) > 1:
            raise sa_exc.MultipleResultsFound("Multiple rows were found when one or none was required")
        return self._plan.row(rows[0]) if rows else None

    def one(self) -> Row:
        row = self.one_or_none()
        if row is None:
            raise sa_exc.NoResultFound("No row was found when one was required")
        return row

    def scalar(self) -> Any:
        row = self.first()
        return row[0] if row is not None else None

    def scalar_one_or_none(self) -> Any:
        row = self.one_or_none()
        return row[0] if row is not None else None

    def scalar_one(self) -> Any:
        return self.one()[0]

    def all(self) -> list[Row]:
        return [self._plan.row(raw) for raw in self._take()]

    fetchall = all

    def fetchone(self) -> Row | None:
        if self._plan.metadata is None:
            self._take()
        if not self._rows:
            return None
        return self._plan.row(self._rows.pop(0))

    def __iter__(self) -> Iterator[Row]:
        return iter(self.all())

    def keys(self) -> Any:
        return (self._plan.metadata or _NO_COLUMNS).keys

    @property
    def returns_rows(self) -> bool:
        return self._plan.metadata is not None

    def close(self) -> None:
        self._rows = []

    def __getattr__(self, name: str) -> Any:  # mappings(), scalars(), partitions(), ...
        return getattr(self._sqlalchemy(), name)

    def _sqlalchemy(self) -> IteratorResult:
        rows = self._take()
        assert self._plan.metadata is not None  # noqa: S101 - _take raised otherwise
        return IteratorResult(self._plan.metadata, iter(rows))


_NO_COLUMNS = SimpleResultMetaData([])
