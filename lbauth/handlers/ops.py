"""Operations endpoints (contract section 13)."""

from __future__ import annotations

from lbauth.errors import ServerUnavailable
from lbauth.handlers.base import BaseHandler


class HealthHandler(BaseHandler):
    """GET /healthz: the process is up and serving."""

    def get(self) -> None:
        self.send_data({"status": "ok"})


class ReadyHandler(BaseHandler):
    """GET /readyz: the database answers; 503 `server.unavailable` when it does not."""

    async def get(self) -> None:
        if not await self.services.db.ping():
            raise ServerUnavailable("The database is not reachable.", headers={"Retry-After": "5"})
        self.send_data({"status": "ready"})
