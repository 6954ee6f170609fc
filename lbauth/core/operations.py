"""What the operations endpoints ask of the database (contract section 13): whether it answers,
and how far the webhook outbox is behind."""

from __future__ import annotations

from dataclasses import dataclass

from lbauth.clock import Clock
from lbauth.core.clients import outbox
from lbauth.core.mail import outbox as mail_outbox
from lbauth.storage.db import Database


@dataclass(frozen=True)
class OutboxBacklog:
    pending: int  # events waiting to be delivered
    oldest_age: int  # seconds the oldest of them has waited


class Operations:
    def __init__(self, db: Database, clock: Clock) -> None:
        self.db, self.clock = db, clock

    async def database_ready(self) -> bool:
        """GET /readyz: the database answers."""
        return await self.db.ping()

    async def outbox_backlog(self) -> OutboxBacklog | None:
        """The outbox gauges of /metrics; None while the database does not answer."""
        if not await self.db.ping():
            return None
        return OutboxBacklog(*await outbox.pending_summary(self.db, self.clock))

    async def mail_pending(self) -> int | None:
        """The mail gauge of /metrics; None while the database does not answer."""
        if not await self.db.ping():
            return None
        return await mail_outbox.pending_count(self.db)
