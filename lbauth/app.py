"""The URL table: `make_app(services)` -> tornado.web.Application, and nothing else."""

from __future__ import annotations

import logging

import tornado.web

from lbauth import logs
from lbauth.handlers import account, ops, wellknown
from lbauth.handlers.base import NotFoundHandler
from lbauth.services import Services

_access_log = logging.getLogger("lbauth.access")


def make_app(services: Services) -> tornado.web.Application:
    deps = {"services": services}
    routes = [
        (r"/healthz", ops.HealthHandler),
        (r"/readyz", ops.ReadyHandler),
        (r"/.well-known/jwks.json", wellknown.JwksHandler),
        (r"/.well-known/oauth-authorization-server", wellknown.MetadataHandler),
        (r"/api/auth/login", account.LoginHandler),
    ]
    return tornado.web.Application(
        [tornado.web.url(path, handler, deps) for path, handler in routes],
        default_handler_class=NotFoundHandler,
        default_handler_args=deps,
        log_function=_log_request,
    )


def _log_request(handler: tornado.web.RequestHandler) -> None:
    """One access-log line per request: the path only, never the query string or the body."""
    request = handler.request
    logs.event(_access_log, "request", method=request.method, path=request.path, status=handler.get_status(),
               ms=round(request.request_time() * 1000, 2), requestId=getattr(handler, "request_id", None))
