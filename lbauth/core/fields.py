"""Required fields of a request body, form or JSON (contract 3: `Field required: <name>`)."""

from __future__ import annotations

from collections.abc import Mapping
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
