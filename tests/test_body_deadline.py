"""A request body must arrive within BODY_TIMEOUT_SECONDS of its headers, or the connection is
closed without an answer (lbauth.server.BodyDeadline, Tornado's body_timeout without its cost)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from lbauth import server as server_module

HEAD = (b"POST /api/oauth/token/code HTTP/1.1\r\nHost: localhost\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 29\r\n\r\n")


@pytest.mark.parametrize("backend", ["sqlite"])  # HTTP only: one database is enough
async def test_a_body_that_stops_arriving_closes_the_connection(server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_module, "BODY_TIMEOUT_SECONDS", 0.3)
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(HEAD + b"grant_type=authoriz")
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, nothing answered
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_a_slow_body_within_the_deadline_is_answered(server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_module, "BODY_TIMEOUT_SECONDS", 2)
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(HEAD + b"grant_type=authoriz")
        await writer.drain()
        await asyncio.sleep(0.5)
        writer.write(b"ation_code")
        await writer.drain()
        status = await asyncio.wait_for(reader.readline(), 5)
        assert status.startswith(b"HTTP/1.1 400 ")  # answered: the fields are missing
        await asyncio.sleep(2)  # the deadline passed after the body had arrived: nothing closes
        writer.write(HEAD + b"grant_type=authorization_code")
        await writer.drain()
        assert (await asyncio.wait_for(reader.readuntil(b"HTTP/1.1 400 "), 5)).endswith(b"HTTP/1.1 400 ")
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
