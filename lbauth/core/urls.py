"""Redirect URI and webhook URL rules (spec section 5, contract sections 5 and 10)."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from lbauth.errors import ValidationFailed

MAX_URL_LENGTH = 2000
# Contract 5: scheme http, host exactly localhost or 127.0.0.1, any port, no user-info part.
_LOOPBACK_REDIRECT = re.compile(r"http://(?:localhost|127\.0\.0\.1)(?::(\d{1,5}))?(?:[/?][^#]*)?")
_UNSAFE = re.compile(r"[\x00-\x20\x7f\\]")
# RFC 8252 7.1: a native app's private-use scheme is a reversed domain name, so it has a dot.
_PRIVATE_USE_SCHEME = re.compile(r"[a-z][a-z0-9+-]*(?:\.[a-z0-9+-]+)+")


def is_loopback_redirect(uri: str) -> bool:
    """A redirect to a program on the user's own device: allowed without registration."""
    if not isinstance(uri, str) or len(uri) > MAX_URL_LENGTH or _UNSAFE.search(uri):
        return False
    match = _LOOPBACK_REDIRECT.fullmatch(uri)
    return bool(match) and (match.group(1) is None or int(match.group(1)) <= 65535)


def redirect_allowed(uri: str, registered: list[str]) -> bool:
    """Exact match against a registered URI (no prefix, case, slash, query or fragment variants),
    or the localhost rule."""
    return uri in registered or is_loopback_redirect(uri)


def check_redirect_uri(uri: str, *, development: bool) -> str:
    """Validate a redirect URI being registered: absolute, no fragment (RFC 6749 3.1.2), HTTPS unless
    it is a loopback address, a native app's private-use scheme, or the server runs in development."""
    if not isinstance(uri, str) or not uri or len(uri) > MAX_URL_LENGTH or _UNSAFE.search(uri):
        raise ValidationFailed("redirect URI must be a URL without spaces or control characters")
    parts = urlsplit(uri)
    if parts.fragment or "#" in uri:
        raise ValidationFailed("redirect URI must not contain a fragment (RFC 6749 3.1.2)")
    if parts.scheme == "https" and parts.hostname and not parts.username:
        return uri
    if parts.scheme == "http" and parts.hostname and not parts.username:
        if is_loopback_redirect(uri) or parts.hostname == "::1" or development:
            return uri
        raise ValidationFailed("redirect URI must use https (http is allowed only for localhost)")
    if _PRIVATE_USE_SCHEME.fullmatch(parts.scheme) and not parts.netloc:
        return uri
    raise ValidationFailed("redirect URI must be an https URL, a localhost http URL, "
                           "or a private-use scheme such as com.example.app:/callback")


def check_webhook_url(url: str, *, development: bool) -> str:
    """Syntax, and in production HTTPS and no literal loopback/private/link-local address. The
    address a name resolves to is checked again at every delivery."""
    if not isinstance(url, str) or len(url) > MAX_URL_LENGTH or _UNSAFE.search(url):
        raise ValidationFailed("webhook URL must be a URL without spaces or control characters")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.fragment:
        raise ValidationFailed("webhook URL must be an absolute http(s) URL without user-info or fragment")
    if development:
        return url
    if parts.scheme != "https":
        raise ValidationFailed("webhook URL must use https in production")
    if is_forbidden_address(parts.hostname):
        raise ValidationFailed("webhook URL must not point to a loopback, private or link-local address")
    return url


def is_forbidden_address(host: str) -> bool:
    """Loopback, private, link-local and other non-public addresses (a production webhook must not
    reach into the server's own network). Names are checked after resolution, at delivery."""
    if host.lower() in ("localhost", "localhost.") or host.lower().endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return not address.is_global
