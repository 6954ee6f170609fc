"""Discovery documents: JWKS (RFC 7517) and authorization server metadata (RFC 8414)."""

from __future__ import annotations

import json

from lbauth.core import scopes
from lbauth.handlers.base import BaseHandler
from lbauth.settings import Settings

_PUBLIC_CACHE = "public, max-age=300"


def metadata(settings: Settings) -> dict:
    """RFC 8414 section 2, for the endpoints this server has."""
    base, pages = settings.base_url, settings.auth_url
    return {
        "issuer": settings.issuer,
        "authorization_endpoint": f"{pages}/oauth/",
        "token_endpoint": f"{base}/oauth/token",
        "jwks_uri": f"{base}/.well-known/jwks.json",
        "scopes_supported": list(scopes.ALL),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "revocation_endpoint": f"{base}/oauth/revoke",
        "revocation_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "introspection_endpoint": f"{base}/oauth/introspect",
        "introspection_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        # lbauth's own: the revocation check-list feed that offline verifiers poll (contract 7, 9)
        "revocation_feed_endpoint": f"{base}/api/oauth/revocations",
        "code_challenge_methods_supported": ["S256"],
    }


class JwksHandler(BaseHandler):
    """GET /.well-known/jwks.json: every key that may still verify a live token."""

    def set_default_headers(self) -> None:
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Cache-Control", _PUBLIC_CACHE)

    def get(self) -> None:
        self.set_header("Content-Type", "application/jwk-set+json")
        self.finish(json.dumps(self.services.keyring.jwks, separators=(",", ":")))


class MetadataHandler(BaseHandler):
    """GET /.well-known/oauth-authorization-server."""

    def set_default_headers(self) -> None:
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Cache-Control", _PUBLIC_CACHE)

    def get(self) -> None:
        self.send_json(metadata(self.services.settings))
