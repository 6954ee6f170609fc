"""Operations endpoints (contract section 13)."""

from __future__ import annotations

import hmac

from prometheus_client import CONTENT_TYPE_LATEST

from lbauth.errors import NotFound, ServerUnavailable, TokenInvalid
from lbauth.handlers.base import BaseHandler


class HealthHandler(BaseHandler):
    """GET /healthz: the process is up and serving."""

    def get(self) -> None:
        self.send_data({"status": "ok"})


class ReadyHandler(BaseHandler):
    """GET /readyz: the database answers; 503 `server.unavailable` when it does not."""

    async def get(self) -> None:
        if not await self.services.operations.database_ready():
            raise ServerUnavailable("The database is not reachable.", headers={"Retry-After": "5"})
        self.send_data({"status": "ready"})


class MetricsHandler(BaseHandler):
    """GET /metrics: Prometheus text. Open in development; in production it needs
    `Authorization: Bearer <LBAUTH_METRICS_TOKEN>`, and does not exist when that is unset."""

    async def get(self) -> None:
        s = self.services
        if not s.settings.development:
            if not s.settings.metrics_token:
                raise NotFound()
            if not hmac.compare_digest(self.bearer_token().encode(), s.settings.metrics_token.encode()):
                raise TokenInvalid("A valid metrics token is required.")
        m = s.metrics
        m.checklist_size.set(len(s.checklist))
        backlog = await s.operations.outbox_backlog()
        if backlog is not None:  # the gauges from the database; the counters even when it is away
            m.outbox_depth.set(backlog.pending)
            m.outbox_oldest.set(backlog.oldest_age)
        mail_pending = await s.operations.mail_pending()
        if mail_pending is not None:
            m.mail_pending.set(mail_pending)
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.finish(m.render())
