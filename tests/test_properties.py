"""Hypothesis properties (issue 8) of the pure parts a hostile caller reaches first: the redirect URI
matcher, scope parsing, credential prefixes, the webhook signature helper and access-token parsing.
No server: these are functions, checked over many generated inputs."""

from __future__ import annotations

import hashlib
import hmac
import re
import string
import time
from urllib.parse import urlsplit

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from lbauth import webhooks
from lbauth.core import scopes, urls
from lbauth.core.crypto import opaque
from lbauth.errors import ScopeInvalid
from lbauth.verify import TokenError, decode_access_token

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
url_text = st.text(alphabet=string.printable + "é\u00a0\u2028", max_size=120)


@FAST
@given(st.one_of(url_text, st.builds(lambda host, port, path: f"http://{host}{port}{path}",
                                      st.sampled_from(["localhost", "127.0.0.1", "LOCALHOST", "127.0.0.2",
                                                       "localhost.evil.com", "user@localhost", "[::1]"]),
                                      st.sampled_from(["", ":0", ":8080", ":65535", ":65536", ":99999", ":x"]),
                                      st.sampled_from(["", "/", "/cb?x=1", "#frag", "/cb#f", "\\@evil.com"]))))
def test_the_localhost_rule_admits_only_plain_loopback_http(uri):
    if urls.is_loopback_redirect(uri):
        parts = urlsplit(uri)
        assert parts.scheme == "http" and parts.hostname in ("localhost", "127.0.0.1")
        assert parts.username is None and parts.password is None and not parts.fragment and "#" not in uri
        assert parts.port is None or parts.port <= 65535
        assert uri.split("/")[2].split(":")[0] in ("localhost", "127.0.0.1")  # exactly, not a lookalike


@pytest.mark.parametrize(("uri", "admitted"), [
    # Contract 5: scheme http, host exactly localhost or 127.0.0.1, any port, any path and query.
    ("http://localhost/cb", True), ("http://localhost:8080/callback", True), ("http://127.0.0.1/", True),
    ("http://127.0.0.1:65535/cb?x=1", True), ("http://localhost", True),
    # Not plain loopback http: every one refused.
    ("https://localhost/cb", False), ("http://[::1]/cb", False), ("http://127.0.0.2/cb", False),
    ("http://LOCALHOST/cb", False), ("http://localhost.evil.example/", False),
    ("http://localhost@evil.example/", False), ("http://user@localhost/cb", False),
    ("http://localhost:65536/cb", False), ("http://localhost:x/cb", False), ("http://localhost/cb#f", False),
    ("http://localhost\\@evil.example/", False), ("ftp://localhost/cb", False), ("localhost/cb", False),
])
def test_the_localhost_rule_on_known_uris(uri, admitted):
    """The property above only looks at what is admitted: a rule admitting nothing would pass it.
    These fix both outcomes."""
    assert urls.is_loopback_redirect(uri) is admitted


@FAST
@given(st.lists(st.sampled_from(["https://app.example/cb", "https://app.example/cb/", "com.example.app:/cb",
                                 "https://APP.example/cb", "https://app.example/cb?x=1"]), min_size=1, max_size=3),
       st.sampled_from(["https://app.example/cb", "https://app.example/CB", "https://app.example/cb/",
                        "https://app.example/cb?x=1", "https://app.example/cb?x=2", "https://app.example/cb#f",
                        "https://app.example/cb%2F", "https://app.example", "com.example.app:/cb"]))
def test_registered_redirect_uris_match_exactly(registered, candidate):
    assert urls.redirect_allowed(candidate, registered) == (candidate in registered)



loopback_uri = st.builds(lambda scheme, host, port, rest: f"{scheme}://{host}{port}{rest}",
                         st.sampled_from(["http", "https", "HTTP"]),
                         st.sampled_from(["localhost", "127.0.0.1", "[::1]", "LOCALHOST", "[::2]", "127.0.0.2",
                                          "localhost.evil.com", "user@localhost", "[0:0:0:0:0:0:0:1]"]),
                         st.sampled_from(["", ":0", ":80", ":8080", ":49152", ":65535", ":65536", ":x", ":"]),
                         st.sampled_from(["", "/", "/cb", "/cb/", "/CB", "/cb?x=1", "/cb?x=2", "?x=1", "/cb#f",
                                          "\\@evil.com", "/c b"]))


def _loopback_oracle(uri: str) -> tuple[str, str, str] | None:
    """(host, path, query) of an http URI on localhost, 127.0.0.1 or [::1] with a valid port or
    none, written independently of lbauth with urlsplit."""
    if any(c in uri for c in "#\\ ") or not uri.startswith("http://"):
        return None
    parts = urlsplit(uri)
    netloc = parts.netloc
    host, _, port = netloc.rpartition(":") if not netloc.endswith("]") and ":" in netloc else (netloc, "", "")
    if host not in ("localhost", "127.0.0.1", "[::1]") or (":" in netloc and not netloc.endswith("]")
                                                         and not (port.isdigit() and int(port) <= 65535)):
        return None
    return host, parts.path, parts.query


@FAST
@given(loopback_uri, loopback_uri)
def test_a_registered_loopback_uri_matches_on_any_port_and_nothing_else(registered, requested):
    """RFC 8252 7.3 (contract 5): a registered loopback URI admits the request's port, or any port
    when it has none; scheme, host, path and query match exactly. Other URIs match byte for byte."""
    reg, req = _loopback_oracle(registered), _loopback_oracle(requested)
    expected = requested == registered or (reg is not None and reg == req)
    assert urls.matches_registered(requested, registered) == expected
    assert urls.redirect_allowed(requested, [registered]) == (expected or urls.is_loopback_redirect(requested))


@FAST
@given(st.one_of(url_text, loopback_uri, st.builds(lambda scheme, host, port, rest: f"{scheme}://{host}{port}{rest}",
                                                   st.sampled_from(["https", "http", "com.example.app", "ftp"]),
                                                   st.sampled_from(["app.example", "APP.example", "*.example", "*",
                                                                    "a_b.example", "xn--bcher-kva.example", ""]),
                                                   st.sampled_from(["", ":443", ":8443", ":*", ":99999"]),
                                                   st.sampled_from(["", "/cb", ";script-src *", " x"]))))
def test_a_form_action_source_is_only_ever_one_host_source(uri):
    """Contract 5: the origin as scheme://host[:port], never `*`, a wildcard host or a bare scheme;
    nothing that could end the directive or add another source."""
    source = urls.form_action_source(uri)
    if source is None:
        return
    assert re.fullmatch(r"https?://[a-z0-9-]+(\.[a-z0-9-]+)*(:\d{1,5})?", source), source
    parts = urlsplit(uri)
    assert source == f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port is not None else "")


@pytest.mark.parametrize(("uri", "source"), [
    ("https://app.example/cb", "https://app.example"),
    ("https://app.example:8443/cb?x=1", "https://app.example:8443"),
    ("http://localhost:8080/callback", "http://localhost:8080"),
    ("http://127.0.0.1/cb", "http://127.0.0.1"),
    ("https://xn--bcher-kva.example/cb", "https://xn--bcher-kva.example"),
    # No host-source can name these: never `*`, a wildcard host or a bare scheme (contract 5).
    ("com.example.app:/cb", None), ("https://*.example/cb", None), ("https://*/cb", None),
    ("ftp://app.example/cb", None), ("https://app.example;script-src */cb", None),
    ("http://[::1]:8080/cb", None), ("https://user@app.example/cb", None),
])
def test_the_form_action_source_of_known_uris(uri, source):
    """The property above only checks a source when there is one: a function that never gave one
    would pass it. These fix both outcomes."""
    assert urls.form_action_source(uri) == source


# Contract 5 and 15: OpenID Connect's three, then the nine of the specification's table, in its order
# (`scopes_supported` and `apps create` list them so). Written out here, not read from lbauth.
CONTRACT_SCOPES = ("openid", "profile", "email", "userinfo", "memory.read", "chat.read", "chat.write", "note.write",
                   "voice", "plaza.read", "plaza.write", "agent_memory")


def test_the_permission_table_is_the_contracts():
    assert tuple(scopes.ALL) == CONTRACT_SCOPES


@FAST
@given(st.lists(st.one_of(st.sampled_from(CONTRACT_SCOPES), st.text(max_size=20)), max_size=12))
@example(list(reversed(CONTRACT_SCOPES)))  # every scope, out of order: table order must come back
@example(["chat.write", "userinfo", "chat.write", "openid"])  # a repeat
@example(["userinfo", "admin"])  # one unknown
def test_scopes_come_back_known_deduplicated_and_in_table_order(requested):
    try:
        parsed = scopes.validate(requested)
    except ScopeInvalid as exc:
        assert any(s not in CONTRACT_SCOPES for s in requested)
        assert len(exc.message) < 200  # an unknown scope is named briefly, never echoed at length
        return
    assert set(parsed) == set(requested)
    assert list(parsed) == [s for s in CONTRACT_SCOPES if s in parsed]
    assert scopes.parse_space_separated("  ".join(requested)) == parsed


@FAST
@given(st.one_of(st.text(max_size=40), st.none(), st.integers(), st.binary(max_size=10)),
       st.sampled_from([opaque.CODE, opaque.REFRESH_TOKEN, opaque.USER_TOKEN]))
def test_a_credential_prefix_needs_a_string_that_starts_with_it_and_goes_on(value, prefix):
    expected = isinstance(value, str) and value.startswith(prefix) and len(value) > len(prefix)
    assert opaque.has_prefix(value, prefix) == expected
    assert opaque.has_prefix(prefix + (value if isinstance(value, str) and value else "x"), prefix)


def spec_signature(secret: str, timestamp: str, body: bytes) -> str:
    """Spec section 6, computed with the standard library: the lowercase hex HMAC-SHA256, keyed with
    the webhook secret, of `<X-Service-Timestamp>.<raw body>`."""
    return hmac.new(secret.encode("utf-8"), timestamp.encode("ascii") + b"." + body, hashlib.sha256).hexdigest()


def test_a_webhook_signature_is_the_spec_hmac_of_a_known_message():
    """A pinned vector: HMAC-SHA256 of b"1900000000.{}" under the key b"s", as
    `printf '1900000000.{}' | openssl dgst -sha256 -hmac s` gives it."""
    expected = "c3e2fba8f76288c5435487413e9b137345a2e95d4816285abfce90e49914254e"
    assert spec_signature("s", "1900000000", b"{}") == expected
    assert webhooks.sign("s", "1900000000", b"{}") == expected


@FAST
@given(st.text(min_size=1, max_size=64), st.binary(max_size=512), st.integers(0, 2**40))
def test_a_webhook_signature_verifies_and_any_change_breaks_it(secret, body, timestamp):
    stamp = str(timestamp)
    signature = spec_signature(secret, stamp, body)
    assert re.fullmatch(r"[0-9a-f]{64}", signature)
    assert webhooks.sign(secret, stamp, body) == signature  # what the deliverer sends
    webhooks.verify_signature(secret, stamp, body, signature, now=timestamp)
    with pytest.raises(webhooks.InvalidSignature):
        webhooks.verify_signature(secret, stamp, body + b" ", signature, now=timestamp)
    with pytest.raises(webhooks.InvalidSignature):
        webhooks.verify_signature(secret + "x", stamp, body, signature, now=timestamp)
    with pytest.raises(webhooks.InvalidSignature):
        webhooks.verify_signature(secret, stamp, body, signature, now=timestamp + webhooks.TOLERANCE_SECONDS + 1)


@FAST
@given(st.text(max_size=80), st.text(max_size=20))
def test_a_forged_webhook_signature_is_refused_cleanly(signature, timestamp):
    """Whatever arrives in the two headers, the helper answers InvalidSignature, never a crash."""
    assume(signature != spec_signature("s", timestamp, b"{}") if timestamp.isascii() else True)
    with pytest.raises(webhooks.InvalidSignature):
        webhooks.verify_signature("s", timestamp, b"{}", signature, now=time.time())


_KEY = ec.generate_private_key(ec.SECP256R1()).public_key()
_KEYS = {"kid-1": ("ES256", _KEY)}
jws_part = st.text(alphabet=string.ascii_letters + string.digits + "-_=+/.", max_size=60)


@FAST
@given(st.one_of(st.text(max_size=200), st.builds(lambda a, b, c: f"lba_at_{a}.{b}.{c}", jws_part, jws_part, jws_part),
                 st.builds(lambda s: "lba_at_" + s, st.text(max_size=200))))
def test_any_string_as_an_access_token_is_refused_with_a_token_error(token):
    """The verifier's parser meets attacker text before any signature check: it must only ever
    answer TokenError (401 oauth2.token.invalid / expired), never another exception."""
    with pytest.raises(TokenError) as refused:
        decode_access_token(token, _KEYS, issuer="https://i", audience="https://a", now=time.time())
    assert refused.value.sub_code in ("oauth2.token.invalid", "oauth2.token.expired")
