"""Required fields of a request body, form or JSON (contract 3: `Field required: <name>`), and the one
value of a query or form parameter."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lbauth.errors import ValidationFailed


def require(fields: Mapping[str, Any], *names: str) -> list[Any]:
    """The named fields, or `Field required: <name>` for the first one missing or empty."""
    values = []
    for name in names:
        value = fields.get(name)
        if value is None or value == "":
            raise ValidationFailed(f"Field required: {name}")
        values.append(value)
    return values


def one(params: Mapping[str, Sequence[str]], name: str) -> str | None:
    """The first value sent for `name`, or None. `params` maps each name to all its values; the
    caller refuses repeats where they matter (RFC 6749 3.1: no parameter more than once)."""
    values = params.get(name)
    return values[0] if values else None
