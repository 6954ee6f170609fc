"""Redirect URI and webhook URL rules (spec section 5, contract sections 5 and 10)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from urllib.parse import SplitResult, urlencode, urlsplit

from lbauth.errors import ValidationFailed

MAX_URL_LENGTH = 2000
# A loopback URI (RFC 8252 7.3): http, host localhost, 127.0.0.1 or [::1], any port, no user-info
# part; groups: host, port, path and query.
_LOOPBACK = re.compile(r"http://(localhost|127\.0\.0\.1|\[::1\])(?::(\d{1,5}))?((?:[/?][^#]*)?)")
# CSP 3 host-source host-part: dot-separated ALPHA / DIGIT / "-" labels (no IPv6 literal, no "*").
_CSP_HOST = re.compile(r"[a-z0-9-]+(?:\.[a-z0-9-]+)*")
_UNSAFE = re.compile(r"[\x00-\x20\x7f\\]")
# RFC 8252 7.1: a native app's private-use scheme is a reversed domain name, so it has a dot.
_PRIVATE_USE_SCHEME = re.compile(r"[a-z][a-z0-9+-]*(?:\.[a-z0-9+-]+)+")


def split(url: str) -> SplitResult | None:
    """`urlsplit`, or None for a URL it refuses: a host that changes under NFKC normalization (a
    full-width `/`), a malformed IPv6 literal. Callers answer 400 for those, never 500."""
    try:
        return urlsplit(url)
    except ValueError:
        return None


def display_host(uri: str) -> str:
    """What a consent page names as where a redirect URI sends the code: the host as the browser
    will reach it (an internationalized name in its ASCII, punycode form, so that a Cyrillic
    `\u0430pple.com` cannot pass for apple.com), with its port; a native app's private-use URI by
    its scheme (`com.example.app:`), which the device hands to the app that claimed it."""
    parts = split(uri)
    if parts is None:
        return uri
    if parts.scheme not in ("http", "https"):
        return f"{parts.scheme}:"
    host = parts.hostname or ""
    try:
        host = host.encode("idna").decode("ascii")
    except UnicodeError:
        pass
    try:
        port = parts.port
    except ValueError:
        port = None
    if ":" in host:
        host = f"[{host}]"
    return host + (f":{port}" if port is not None else "")


def is_loopback_redirect(uri: str) -> bool:
    """A redirect to a program on the user's own device, allowed without registration: the
    specification's localhost rule names localhost and 127.0.0.1 only, not [::1] (contract 5)."""
    parts = _loopback_parts(uri) if isinstance(uri, str) else None
    return parts is not None and parts[0] != "[::1]"


def _loopback_parts(uri: str) -> tuple[str, str] | None:
    """(host, path and query) of a loopback `http` URI with a valid port or none, else None."""
    if len(uri) > MAX_URL_LENGTH or _UNSAFE.search(uri):
        return None
    match = _LOOPBACK.fullmatch(uri)
    if match is None or (match.group(2) is not None and int(match.group(2)) > 65535):
        return None
    return match.group(1), match.group(3)


def matches_registered(uri: str, registered: str) -> bool:
    """RFC 3986 6.2.1 simple string comparison with a registered URI; when that URI is a loopback
    one (http, localhost / 127.0.0.1 / [::1]), the request's port may differ or the registered URI
    may have none, while scheme, host, path and query still match exactly (RFC 8252 7.3, contract 5)."""
    if uri == registered:
        return True
    loopback = _loopback_parts(registered)
    return loopback is not None and _loopback_parts(uri) == loopback


def is_registered(uri: str, registered: list[str]) -> bool:
    return any(matches_registered(uri, candidate) for candidate in registered)


def redirect_allowed(uri: str, registered: list[str]) -> bool:
    """A registered URI (exact, or a registered loopback URI on any port), or the localhost rule."""
    return is_registered(uri, registered) or is_loopback_redirect(uri)


def goes_to_this_device(uri: str) -> bool:
    """A loopback redirect: to a program on the user's own device (localhost, 127.0.0.1, [::1])."""
    return _loopback_parts(uri) is not None


def form_action_source(uri: str) -> str | None:
    """The CSP host-source (scheme://host[:port], CSP 3 2.3.1) naming the redirect URI's origin,
    for the `form-action` of a page whose form ends at that redirect URI (contract 5). None when no
    host-source can name it: a private-use scheme (a bare `scheme:` source is refused: it would
    admit every URI of the scheme) or an IPv6 literal, which CSP's grammar has no room for."""
    parts = split(uri)
    if parts is None:
        return None
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or parts.username is not None or not _CSP_HOST.fullmatch(host):
        return None
    try:
        port = parts.port
    except ValueError:
        return None
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def check_redirect_uri(uri: str, *, development: bool) -> str:
    """Validate a redirect URI being registered: absolute, no fragment (RFC 6749 3.1.2), HTTPS unless
    it is a loopback address, a native app's private-use scheme, or the server runs in development."""
    if not isinstance(uri, str) or not uri or len(uri) > MAX_URL_LENGTH or _UNSAFE.search(uri):
        raise ValidationFailed("redirect URI must be a URL without spaces or control characters")
    parts = split(uri)
    if parts is None:
        raise ValidationFailed("redirect URI is not a valid URL (its host changes under Unicode normalization)")
    if parts.fragment or "#" in uri:
        raise ValidationFailed("redirect URI must not contain a fragment (RFC 6749 3.1.2)")
    if "@" in parts.netloc:  # user-info, even empty (`https://@good.example/cb`), misleads a reader
        raise ValidationFailed("redirect URI must not contain user-info (a name or an @ before the host)")
    if parts.scheme == "https" and parts.hostname:
        return uri
    if parts.scheme == "http" and parts.hostname:
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
    parts = split(url)
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc \
            or parts.fragment:
        raise ValidationFailed("webhook URL must be an absolute http(s) URL without user-info or fragment")
    if development:
        return url
    if parts.scheme != "https":
        raise ValidationFailed("webhook URL must use https in production")
    if is_forbidden_address(parts.hostname):
        raise ValidationFailed("webhook URL must not point to a loopback, private or link-local address")
    return url


def is_forbidden_address(host: str, *, allow_loopback: bool = False) -> bool:
    """Any address that is not globally routable (`is_public_address`), and the `localhost` names:
    what a production server must not call (webhooks, metadata documents: contract 10 and 17).
    `allow_loopback`: development, where a document or webhook receiver on this machine is fine.
    Names are checked again after resolution, when connecting."""
    lowered = host.lower()
    if lowered in ("localhost", "localhost.") or lowered.endswith((".localhost", ".localhost.")):
        return not allow_loopback
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    if allow_loopback and _unwrapped(address).is_loopback:
        return False
    return not is_public_address(address)


# Special-use blocks that Python 3.11's `is_global` still calls global (IANA special-purpose
# registries, RFC 6890 and successors).
_NOT_PUBLIC_V4 = tuple(ipaddress.IPv4Network(n) for n in (
    "0.0.0.0/8", "100.64.0.0/10", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "198.18.0.0/15",
    "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4"))
_NOT_PUBLIC_V6 = tuple(ipaddress.IPv6Network(n) for n in (
    "::/8",             # unspecified, loopback, IPv4-compatible and -mapped, IPv4-translated (RFC 2765)
    "64:ff9b::/96",     # NAT64 (RFC 6052): would reach the IPv4 address it embeds
    "64:ff9b:1::/48",   # local-use NAT64 (RFC 8215)
    "100::/64",         # discard-only (RFC 6666)
    "2001::/23",        # IETF protocol assignments, Teredo 2001::/32 among them
    "2001:db8::/32",    # documentation (RFC 3849)
    "2002::/16",        # 6to4 (RFC 3056): would reach the IPv4 address it embeds
    "3fff::/20",        # documentation (RFC 9637)
    "5f00::/16",        # SRv6 SIDs (RFC 9602)
    "fc00::/7",         # unique-local (RFC 4193)
    "fe80::/10",        # link-local
    "fec0::/10",        # site-local (deprecated, RFC 3879)
    "ff00::/8"))        # multicast


def _unwrapped(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The IPv4 address an IPv4-mapped IPv6 address (::ffff:a.b.c.d) stands for; else the address."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def is_public_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Globally routable (contract 17's address guard): not loopback, private, link-local, CGNAT,
    reserved, multicast, unspecified, documentation, benchmarking, unique-local, nor an IPv6 form
    (mapped, translated, NAT64, 6to4, Teredo) that carries an IPv4 address to another network."""
    address = _unwrapped(address)
    if (not address.is_global or address.is_multicast or address.is_private or address.is_reserved
            or address.is_loopback or address.is_link_local or address.is_unspecified):
        return False
    if isinstance(address, ipaddress.IPv4Address):
        return not any(address in network for network in _NOT_PUBLIC_V4)
    return not any(address in network for network in _NOT_PUBLIC_V6)


def with_query(url: str, params: Mapping[str, str | None]) -> str:
    """Append the parameters that have a value to a URI that may already carry a query (RFC 6749
    3.1.2: a redirect URI's query is kept)."""
    query = urlencode({k: v for k, v in params.items() if v is not None})
    return f"{url}{'&' if urlsplit(url).query else ('' if url.endswith('?') else '?')}{query}"
