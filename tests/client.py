"""A small HTTP client for the tests, over Tornado's AsyncHTTPClient: real sockets, no shortcuts."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.httputil import HTTPHeaders


@dataclass
class Response:
    status: int
    headers: HTTPHeaders
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def data(self) -> Any:
        document = self.json
        assert document["code"] == 0, document
        return document["data"]

    def assert_error(self, status: int, sub_code: str) -> dict:
        """The contract's error envelope: HTTP status equals `code`, and the subCode."""
        assert self.status == status, (self.status, self.text)
        document = self.json
        assert document == {"code": status, "message": document["message"], "subCode": sub_code}, document
        assert isinstance(document["message"], str) and document["message"]
        return document


# Every error answer any test received (status >= 400): the suite-wide leak check reads them.
ERROR_BODIES: list[bytes] = []


class Client:
    def __init__(self, base_url: str, max_clients: int = 10) -> None:
        """`max_clients`: requests in flight at once (more wait their turn in the client)."""
        self.base_url = base_url
        self._http = AsyncHTTPClient(force_instance=True, max_clients=max_clients)

    async def request(self, method: str, path: str, *, json_body: Any = None, form: Any = None,
                      body: bytes | str | None = None, headers: dict[str, str] | None = None,
                      bearer: str | None = None, timeout: float = 20, source: str | None = None) -> Response:
        """`source`: the local address to send from (127.0.0.2 and the like: another caller)."""
        headers = dict(headers or {})
        if json_body is not None:
            body = json.dumps(json_body)
            headers.setdefault("Content-Type", "application/json")
        elif form is not None:
            body = urlencode(form, doseq=True)
            headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
        if bearer is not None:
            headers["Authorization"] = f"Bearer {bearer}"
        if body is None and method in ("POST", "PUT", "PATCH"):
            body = b""
        url = path if path.startswith("http") else self.base_url + path
        request = HTTPRequest(url, method=method, headers=headers, body=body, follow_redirects=False,
                              request_timeout=timeout, allow_nonstandard_methods=True, network_interface=source)
        response = await self._http.fetch(request, raise_error=False)
        if response.code == 599:
            raise response.error  # type: ignore[misc]
        if response.code >= 400:
            ERROR_BODIES.append(response.body or b"")
        return Response(response.code, response.headers, response.body or b"")

    async def get(self, path: str, **kwargs: Any) -> Response:
        return await self.request("GET", path, **kwargs)

    async def post(self, path: str, *, json: Any = None, **kwargs: Any) -> Response:
        return await self.request("POST", path, json_body=json, **kwargs)

    async def delete(self, path: str, **kwargs: Any) -> Response:
        return await self.request("DELETE", path, **kwargs)

    def close(self) -> None:
        self._http.close()
