"""Finding the issuer's documents: its RFC 8414 metadata names the JWKS and the revocation feed
(contract section 9). Blocking HTTP with the standard library; the Verifier runs it off the loop."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

WELL_KNOWN = "/.well-known/oauth-authorization-server"


def metadata_url(issuer: str) -> str:
    """Where RFC 8414 3.1 puts an issuer's metadata: `/.well-known/oauth-authorization-server`
    inserted between the host and the path, the path's terminating "/" removed
    (`https://h/tenant` -> `https://h/.well-known/oauth-authorization-server/tenant`)."""
    parts = urllib.parse.urlsplit(issuer)
    path = parts.path.rstrip("/")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, WELL_KNOWN + path, "", ""))


def fetch_json(url: str, timeout: float) -> Any:
    """GET `url` as JSON; only http(s) URLs (a metadata document could name any scheme)."""
    if urllib.parse.urlsplit(url).scheme not in ("https", "http"):
        raise ValueError(f"refusing to fetch a non-HTTP URL: {url[:100]}")
    request = urllib.request.Request(url, headers={"Accept": "application/json"})  # noqa: S310 - checked above
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
        return json.loads(response.read())


@dataclass(frozen=True)
class ServerMetadata:
    """What a verifier reads from the authorization server's metadata."""

    jwks_uri: str
    revocation_feed_endpoint: str | None


def discover(issuer: str, timeout: float) -> ServerMetadata:
    """The issuer's metadata, refused unless its `issuer` is `issuer` byte for byte (RFC 8414 3.3)."""
    meta = fetch_json(metadata_url(issuer), timeout)
    if not isinstance(meta, dict) or meta.get("issuer") != issuer:
        raise ValueError(f"the metadata at {metadata_url(issuer)} names another issuer than "
                         f"{issuer!r} (RFC 8414 3.3: they must be identical)")
    return ServerMetadata(meta["jwks_uri"], meta.get("revocation_feed_endpoint"))
