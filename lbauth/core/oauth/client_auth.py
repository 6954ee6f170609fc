"""Client authentication at the token, revocation and introspection endpoints (RFC 6749 2.3).

A method finds the credentials a request presents; checking them is one statement, or part of
the grant's own statement (grants.py). Public clients authenticate with method `none` (contract
17): their apps store `PUBLIC_SECRET_DIGEST` where a confidential app stores its secret's digest,
so the same digest match in SQL finds them, and no secret ever matches them.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import unquote

from lbauth.core.crypto import opaque
from lbauth.errors import ClientSecretMismatch, ValidationFailed
from lbauth.storage import Connection
from lbauth.storage.records import PUBLIC_CLIENT_METHOD, App
from lbauth.storage.repo import apps as apps_repo

_DUMMY_DIGEST = opaque.digest("lbauth: no such client")
# What a public app stores as its `client_secret_hash` and what its credentials present: the digest
# of any secret is 64 hex digits, never "", so no secret authenticates a public app, nor "" a
# confidential one.
PUBLIC_SECRET_DIGEST = ""


@dataclass(frozen=True)
class ClientCredentials:
    """What a request presents to authenticate its client, not yet checked."""
    client_id: str
    secret: str = field(repr=False)
    method: str  # the token_endpoint_auth_method that presented them (RFC 7591 2)

    @property
    def public(self) -> bool:
        """A public client's: a client id and no secret (method `none`)."""
        return self.method == NoClientSecret.name

    @property
    def secret_digest(self) -> str:
        return PUBLIC_SECRET_DIGEST if self.public else opaque.digest(self.secret)


class ClientAuthMethod(Protocol):
    name: str

    def presented(self, authorization: str, form: Mapping[str, str]) -> bool:
        """Does this request use this method? `authorization` is the Authorization header or ""."""

    def credentials(self, authorization: str, form: Mapping[str, str]) -> ClientCredentials:
        """The credentials, or the error that says why they are unusable."""


class ClientSecretBasic:
    """RFC 6749 2.3.1: HTTP Basic with the form-encoded client id and secret. A `client_id` field
    beside it must name the same client (the MCP Python SDK sends both; contract 11)."""

    name = "client_secret_basic"

    def presented(self, authorization: str, form: Mapping[str, str]) -> bool:
        return bool(authorization)

    def credentials(self, authorization: str, form: Mapping[str, str]) -> ClientCredentials:
        scheme, _, encoded = authorization.partition(" ")
        if scheme.lower() != "basic":
            raise ClientSecretMismatch("Use HTTP Basic or client_secret_post to authenticate the client.")
        if "client_secret" in form:
            raise ValidationFailed("Use one client authentication method, not two (RFC 6749 2.3).")
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            decoded = ""
        client_id, sep, secret = decoded.partition(":")
        if not sep:
            raise ClientSecretMismatch("The Basic credentials are malformed.")
        client_id, secret = unquote(client_id.replace("+", " ")), unquote(secret.replace("+", " "))
        if "\x00" in client_id + secret:  # raw or %00: PostgreSQL text cannot hold it (a 500)
            raise ClientSecretMismatch("The Basic credentials are malformed.")
        if form.get("client_id", client_id) != client_id:
            raise ClientSecretMismatch("client_id in the body names another client than HTTP Basic.")
        return ClientCredentials(client_id, secret, self.name)


class ClientSecretPost:
    """RFC 6749 2.3.1: `client_id` and `client_secret` in the form body."""

    name = "client_secret_post"

    def presented(self, authorization: str, form: Mapping[str, str]) -> bool:
        return bool(form.get("client_secret"))

    def credentials(self, authorization: str, form: Mapping[str, str]) -> ClientCredentials:
        if not form.get("client_id"):
            raise _authentication_required()
        return ClientCredentials(form["client_id"], form["client_secret"], self.name)


class NoClientSecret:
    """RFC 7591 2 `none`: a public client (RFC 6749 2.1) sends its `client_id` in the form, with no
    Authorization header and no `client_secret` field (an empty one is a failed secret, not this)."""

    name = PUBLIC_CLIENT_METHOD

    def presented(self, authorization: str, form: Mapping[str, str]) -> bool:
        return not authorization and "client_secret" not in form and bool(form.get("client_id"))

    def credentials(self, authorization: str, form: Mapping[str, str]) -> ClientCredentials:
        return ClientCredentials(form["client_id"], "", self.name)


def presented_credentials(methods: Sequence[ClientAuthMethod], authorization: str,
                          form: Mapping[str, str]) -> ClientCredentials:
    """The credentials of the first method the request uses; none at all is invalid_client."""
    for method in methods:
        if method.presented(authorization, form):
            return method.credentials(authorization, form)
    raise _authentication_required()


def _authentication_required() -> ClientSecretMismatch:
    return ClientSecretMismatch("Client authentication is required: client_id and client_secret.")


def checked_client(conn: Connection, client_id: str, secret_digest: str) -> App:
    """The app, or ClientSecretMismatch after the same constant-time comparison either way: one
    answer whether the client or the secret is wrong."""
    app = apps_repo.by_client_id(conn, client_id)
    if not hmac.compare_digest(secret_digest, app.client_secret_hash if app else _DUMMY_DIGEST) or app is None:
        raise ClientSecretMismatch()
    return app
