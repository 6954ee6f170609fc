"""Discovery documents: JWKS (RFC 7517) and authorization server metadata (RFC 8414), both open
to browser clients of any origin (contract 11)."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from lbauth import verify
from lbauth.core import acr, scopes
from lbauth.core.oauth.server import AuthorizationServer
from lbauth.core.oidc import claims
from lbauth.core.oidc.id_tokens import ID_TOKEN_ALGS
from lbauth.errors import NotFound
from lbauth.handlers.base import CorsHandler
from lbauth.settings import Settings
from lbauth.storage.records import PUBLIC_CLIENT_METHOD
from lbauth.verify.dpop import DPOP_ALGS

_PUBLIC_CACHE = "public, max-age=300"


def metadata(settings: Settings, server: AuthorizationServer) -> dict:
    """RFC 8414 section 2 and OpenID Connect Discovery 1.0 section 3, one object for both (contract 8);
    `registration_endpoint` (RFC 7591) unless LBAUTH_REGISTRATION is off (contract 17). The grant
    types and client authentication methods are the server's own registries."""
    base, pages = settings.base_url, settings.auth_url
    methods = [method.name for method in server.client_auth_methods]
    # Public clients (`none`, contract 17) use the token and revocation endpoints; introspection
    # needs a confidential client.
    confidential = [name for name in methods if name != PUBLIC_CLIENT_METHOD]
    document = {
        "issuer": settings.issuer,  # byte for byte (contract 1)
        "authorization_endpoint": f"{pages}/oauth/",
        "token_endpoint": f"{base}/oauth/token",
        "jwks_uri": f"{base}/.well-known/jwks.json",
        "userinfo_endpoint": f"{base}/oauth/userinfo",
        "end_session_endpoint": f"{pages}/oauth/logout",
        "revocation_endpoint": f"{base}/oauth/revoke",
        "introspection_endpoint": f"{base}/oauth/introspect",
        "pushed_authorization_request_endpoint": f"{base}/oauth/par",  # RFC 9126 5
        "device_authorization_endpoint": f"{base}/oauth/device_authorization",  # RFC 8628 4
        "require_pushed_authorization_requests": False,  # per app, in its registration
        "dpop_signing_alg_values_supported": list(DPOP_ALGS),  # RFC 9449 5.1
        "scopes_supported": list(scopes.ALL),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": list(server.grants),
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": methods,
        "revocation_endpoint_auth_methods_supported": methods,
        "introspection_endpoint_auth_methods_supported": confidential,
        "subject_types_supported": ["pairwise"],  # sub is the appScopedUserId (contract 15)
        "id_token_signing_alg_values_supported": list(ID_TOKEN_ALGS),
        "claims_supported": claims.SUPPORTED,
        "acr_values_supported": list(acr.SUPPORTED),  # strongest first
        "claims_parameter_supported": False,
        # RFC 9101 10.5: no request objects, by value or by reference
        "request_parameter_supported": False,
        "request_uri_parameter_supported": False,
        # RFC 9207 3: every redirect to a client carries `iss`
        "authorization_response_iss_parameter_supported": True,
        # contract 17: a client_id may be the https URL of its own metadata document
        "client_id_metadata_document_supported": True,
        # lbauth's own: the revocation check-list feed that offline verifiers poll (contract 7, 9)
        "revocation_feed_endpoint": f"{base}/api/oauth/revocations",
    }
    if settings.registration != "off":
        document["registration_endpoint"] = f"{base}/oauth/register"
    return document


def metadata_path(issuer: str) -> str:
    """Where RFC 8414 3.1 puts the document, as lbauth.verify looks for it (`https://h/tenant` ->
    `/.well-known/oauth-authorization-server/tenant`)."""
    return urlsplit(verify.metadata_url(issuer)).path


class JwksHandler(CorsHandler):
    """GET /.well-known/jwks.json: every key that may still verify a live token."""

    def set_default_headers(self) -> None:
        super().set_default_headers()
        self.set_header("Cache-Control", _PUBLIC_CACHE)

    def get(self) -> None:
        self.set_header("Content-Type", "application/jwk-set+json")
        self.finish(json.dumps(self.services.keyring.jwks, separators=(",", ":")))


class MetadataHandler(CorsHandler):
    """GET /.well-known/oauth-authorization-server."""

    def set_default_headers(self) -> None:
        super().set_default_headers()
        self.set_header("Cache-Control", _PUBLIC_CACHE)

    def get(self) -> None:
        self.send_json(metadata(self.services.settings, self.services.oauth))


class IssuerPathMetadataHandler(MetadataHandler):
    """When LBAUTH_ISSUER has a path (contract 8): `/.well-known/oauth-authorization-server{path}`
    and `/.well-known/openid-configuration{path}` (RFC 8414 3.1), and
    `{path}/.well-known/openid-configuration` (OpenID Connect Discovery 4.1); any other path is
    not found."""

    def get(self, _issuer_path: str) -> None:
        path = urlsplit(self.services.settings.issuer).path.rstrip("/")
        if not path or self.request.path not in (metadata_path(self.services.settings.issuer),
                                                 f"/.well-known/openid-configuration{path}",
                                                 f"{path}/.well-known/openid-configuration"):
            raise NotFound()
        super().get()
