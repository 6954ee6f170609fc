"""Resource indicators (RFC 8707) and protected-resource metadata (RFC 9728), for resource services
and for the server alike (contract 17). Pure: the standard library only.

`normalize` is the one comparison rule for resource URIs: the server matches `resource` parameters
with it, and `Verifier(audience=...)` compares a token's `aud` with it, so that
`https://mcp.example.com` and `https://mcp.example.com/` name the same resource.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

WELL_KNOWN = "/.well-known/oauth-protected-resource"
_DEFAULT_PORTS = {"http": 80, "https": 443}


def normalize(uri: Any) -> str | None:
    """The RFC 3986 6.2.2 form of an absolute URI without a fragment (lowercase scheme and host, the
    scheme's default port dropped, an empty path `/`); None when `uri` is not one (RFC 8707 2: a
    resource is an absolute URI and must not include a fragment)."""
    if not isinstance(uri, str) or not uri or len(uri) > 2048 or not uri.isprintable() or " " in uri:
        return None
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError:
        return None
    if not parts.scheme or "#" in uri:
        return None
    scheme = parts.scheme.lower()
    if parts.netloc:
        host = (parts.hostname or "").lower()
        if not host:
            return None
        if ":" in host:  # an IPv6 literal keeps its brackets
            host = f"[{host}]"
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = (userinfo + "@" if userinfo else "") + host
        if port is not None and port != _DEFAULT_PORTS.get(scheme):
            netloc += f":{port}"
        path = parts.path or "/"
        return urlunsplit((scheme, netloc, path, parts.query, ""))
    return scheme + uri[len(parts.scheme):]  # no authority (a URN, say): only the scheme's case


def same_resource(a: Any, b: Any) -> bool:
    """Do two URIs name the same resource (equal RFC 3986 6.2.2 forms)?"""
    if a == b and isinstance(a, str):
        return True
    na = normalize(a)
    return na is not None and na == normalize(b)


def audience_matches(aud: Any, audience: str) -> bool:
    """Is `audience` among a token's `aud` (a string or a list of strings, RFC 7519 4.1.3)? Exact
    first (the usual case costs nothing more), then by normalised form."""
    values = aud if isinstance(aud, list) else [aud]
    if audience in values:
        return True
    wanted = normalize(audience)
    return wanted is not None and any(normalize(value) == wanted for value in values)


def metadata_url(resource: str) -> str:
    """Where RFC 9728 3.1 puts a resource's metadata: `/.well-known/oauth-protected-resource`
    inserted between the host and the resource's path (its terminating "/" removed)."""
    parts = urlsplit(resource)
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, WELL_KNOWN + path, parts.query, ""))


def resource_metadata(resource: str, issuer: str, scopes: Iterable[str] = ()) -> dict[str, Any]:
    """The RFC 9728 2 protected-resource metadata document: `authorization_servers` names `issuer`
    byte for byte (the client compares it with the authorization server's metadata, RFC 8414 3.3)."""
    if normalize(resource) is None:
        raise ValueError("resource must be an absolute URI without a fragment (RFC 8707 2)")
    document: dict[str, Any] = {"resource": resource, "authorization_servers": [issuer],
                                "bearer_methods_supported": ["header"]}
    scopes = [scopes] if isinstance(scopes, str) else list(scopes)
    if scopes:
        document["scopes_supported"] = scopes
    return document
