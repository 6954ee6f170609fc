"""A real webhook receiver on a loopback port: it records every request and answers from a script
(status, headers, delay), so tests can make lbauth meet timeouts, redirects, 410s and 503s."""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from dataclasses import dataclass, field

import tornado.httpserver
import tornado.netutil
import tornado.web


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)  # when it arrived

    @property
    def payload(self) -> dict:
        return json.loads(self.body)

    @property
    def event_id(self) -> str:
        return self.headers["X-Service-Event-Id"]


@dataclass
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    body: bytes = b""


class _Hook(tornado.web.RequestHandler):
    def initialize(self, receiver: Receiver) -> None:
        self.receiver = receiver

    async def post(self, path: str) -> None:
        r = self.receiver
        r.received.append(Received("/" + path, dict(self.request.headers), self.request.body))
        answer = r.script.popleft() if r.script else r.default
        if answer.delay:
            await asyncio.sleep(answer.delay)
        self.set_status(answer.status)
        for name, value in answer.headers.items():
            self.set_header(name, value)
        if answer.body:
            self.write(answer.body)
        r.arrived.set()

    def check_xsrf_cookie(self) -> None:
        pass


class Receiver:
    def __init__(self, port: int = 0) -> None:
        """Listens on `port` (0: any free one); a receiver that was stopped comes back on its port."""
        self.received: list[Received] = []
        self.script: deque[Answer] = deque()
        self.default = Answer()
        self.arrived = asyncio.Event()
        sockets = tornado.netutil.bind_sockets(port, "127.0.0.1")
        self.port = sockets[0].getsockname()[1]
        app = tornado.web.Application([(r"/(.*)", _Hook, {"receiver": self})])
        self._server = tornado.httpserver.HTTPServer(app)
        self._server.add_sockets(sockets)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def answer(self, *answers: Answer) -> None:
        self.script.extend(answers)

    def at(self, path: str) -> list[Received]:
        return [r for r in self.received if r.path == path]

    async def stop(self) -> None:
        self._server.stop()
        await self._server.close_all_connections()
