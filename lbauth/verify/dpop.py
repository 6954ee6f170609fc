"""DPoP (RFC 9449): proofs of possession of a client's key, checked offline by resource services.

A DPoP-bound access token carries `cnf.jkt`, the RFC 7638 thumbprint of the client's public key
(RFC 9449 6.1). The client sends it in `Authorization: DPoP <token>` with a `DPoP` header: a JWS
signed by that key over the request's method and URL, the token's hash, a time and a unique id
(RFC 9449 4.2, 7.1). Pure: no I/O, no clock of its own (`now` is passed in); `ReplayCache` is the
only state, the `jti`s seen within the proof window in this process (RFC 9449 11.1)."""

from __future__ import annotations

import base64
import hashlib
import heapq
import hmac
import json
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from jwt.algorithms import get_default_algorithms
from jwt.exceptions import PyJWTError

from lbauth.verify.claims import TokenError, _json_object, _number, _quoted, _segment, invalid_token
from lbauth.verify.resources import normalize as normalize_uri

DPOP_ALGS = ("ES256", "EdDSA", "RS256")  # asymmetric only: never "none", never HMAC (RFC 9449 4.3 point 5)
PROOF_WINDOW = 60  # seconds: a proof's `iat` may differ from now by this much, either way (RFC 9449 4.3 point 11)
PROOF_TYPE = "dpop+jwt"  # RFC 9449 4.2
INVALID_PROOF = "oauth2.dpop.invalid_proof"
MAX_PROOF_CHARS = 8192  # a proof is a few hundred bytes; more is refused before any parsing
MAX_JTI_CHARS = 256
MAX_REPLAY_ENTRIES = 100_000
# A client signs its proofs with one key, so the header (typ, alg and jwk) of its proofs is the same
# text every time: its parsed key and thumbprint are kept by that text (an ES256 header is about
# 250 characters, an RSA 4096 one about 1,000), and so are normalised URLs. Both are pure functions
# of their input, bounded, and cost an attacker nothing they could not cause uncached.
HEADER_CACHE_ENTRIES = 1024
MAX_CACHED_HEADER_CHARS = 2048
URL_CACHE_ENTRIES = 256
ALGS_PARAM = f'algs="{" ".join(DPOP_ALGS)}"'  # RFC 9449 7.1: the proof algorithms this resource accepts

_ALGORITHMS = {name: alg for name, alg in get_default_algorithms().items() if name in DPOP_ALGS}
_KEY_TYPES = {"ES256": ("EC", "P-256"), "EdDSA": ("OKP", "Ed25519"), "RS256": ("RSA", None)}
_MIN_RSA_BITS = 2048
# RFC 7638 3.2: the required members of each key type, in lexicographic order.
_THUMBPRINT_MEMBERS = {"EC": ("crv", "kty", "x", "y"), "OKP": ("crv", "kty", "x"), "RSA": ("e", "kty", "n")}
_PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})  # RFC 7518 6.2.2, 6.3.2, 6.4.1
_BASE64URL = re.compile(r"[A-Za-z0-9_-]+")
_PERCENT_ENCODED = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")  # RFC 3986 2.3


@dataclass(frozen=True)
class DPoPRequest:
    """What a DPoP proof must match: the request's method and URL as the resource received them
    (RFC 9449 4.3 points 8 and 9), and the proof, the `DPoP` header's value."""

    method: str
    url: str
    proof: str


@dataclass(frozen=True)
class Proof:
    """A checked DPoP proof (RFC 9449 4.2): its key (`jwk`, and `jkt`, its RFC 7638 thumbprint) and claims."""

    jkt: str
    jti: str
    iat: int | float
    htm: str
    htu: str
    alg: str
    ath: str | None = None
    nonce: str | None = None
    jwk: dict[str, Any] = field(default_factory=dict, hash=False)


class DPoPRefusal(TokenError):
    """A refusal of a request made with (or owed) DPoP: the same `sub_code`, `status` and message as a
    TokenError, and the RFC 9449 7.1 challenge, in the `DPoP` scheme: the parameters of the RFC 6750 3
    challenge (with those of RFC 9470 3 and RFC 9728 5.1), then `algs`."""

    @classmethod
    def of(cls, error: TokenError) -> DPoPRefusal:
        """`error`, answered in the DPoP scheme."""
        return cls(error.sub_code, error.status, error.message, acr_values=error.acr_values, max_age=error.max_age)

    @property
    def challenge(self) -> str:
        return in_dpop_scheme(super().challenge)

    def challenge_for(self, scopes: Iterable[str] = (), resource_metadata: str | None = None) -> str:
        if resource_metadata is None:
            return self.challenge
        return in_dpop_scheme(super().challenge_for(scopes, resource_metadata))


class DPoPError(DPoPRefusal):
    """An invalid DPoP proof (RFC 9449 7.1): 401 `oauth2.dpop.invalid_proof`, challenged with
    `DPoP error="invalid_dpop_proof", error_description="...", algs="ES256 EdDSA RS256"`. Its message
    says what is wrong, never what the token or the proof hold."""

    def __init__(self, message: str) -> None:
        super().__init__(INVALID_PROOF, 401, message)

    @property
    def challenge(self) -> str:
        return self.challenge_for()

    def challenge_for(self, scopes: Iterable[str] = (), resource_metadata: str | None = None) -> str:
        """The proof's error first; then, with `resource_metadata`, the RFC 9728 5.1 parameters that a
        request without a token gets (the metadata URL and the scopes)."""
        discovery = TokenError("oauth2.token.missing", 401, self.message).challenge_for(scopes, resource_metadata)
        return in_dpop_scheme(discovery, 'error="invalid_dpop_proof"',
                              f'error_description="{_quoted(self.message)}"')


def in_dpop_scheme(bearer_challenge: str, *first: str) -> str:
    """RFC 9449 7.1: `first`, then the auth-params of an RFC 6750 3 challenge (`Bearer` or
    `Bearer a="1", b="2"`, as TokenError writes them), in the `DPoP` scheme, ending with `algs`."""
    params = bearer_challenge.removeprefix("Bearer").strip()
    return "DPoP " + ", ".join(p for p in (*first, params, ALGS_PARAM) if p)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _same(value: Any, expected: str) -> bool:
    """Constant-time equality of a claim and a string (hmac.compare_digest takes ASCII strings only)."""
    return isinstance(value, str) and value.isascii() and expected.isascii() and hmac.compare_digest(value, expected)


def jwk_thumbprint(jwk: Mapping[str, Any]) -> str:
    """The RFC 7638 thumbprint of a JWK: SHA-256 of its required members (3.2), in lexicographic order
    and without whitespace (3.3), base64url without padding. EC, OKP (RFC 8037 2) and RSA keys;
    ValueError for any other, or a required member that is not a string."""
    kty = jwk.get("kty")
    members = _THUMBPRINT_MEMBERS.get(kty) if isinstance(kty, str) else None
    if members is None or not all(isinstance(jwk.get(name), str) for name in members):
        raise ValueError("not an EC, OKP or RSA public JWK with its required members")
    canonical = json.dumps({name: jwk[name] for name in members}, separators=(",", ":"), ensure_ascii=False)
    return _b64url(hashlib.sha256(canonical.encode("utf-8")).digest())


def access_token_hash(token: str) -> str:
    """`ath` (RFC 9449 4.2): base64url (no padding) of the SHA-256 of the access token's ASCII, as sent
    in the Authorization header, `lba_at_` prefix included. ValueError if it is not ASCII."""
    return _b64url(hashlib.sha256(token.encode("ascii")).digest())


def normalize_htu(url: str) -> str:
    """A URL as RFC 9449 4.3 point 9 compares `htu`: without query and fragment (4.2), in its RFC 3986
    6.2.2 and 6.2.3 form (scheme and host in lower case, percent-encodings in upper case and unreserved
    ones decoded, dot segments removed, the default port dropped, an empty path `/`). ValueError unless
    it is an absolute http or https URL."""
    if not isinstance(url, str):
        raise ValueError("not a URL")
    parts = urlsplit(url)  # ValueError for a bad port or IPv6 literal
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError("not an absolute http(s) URL")
    normalized = normalize_uri(urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")))
    if normalized is None:
        raise ValueError("not an absolute http(s) URL")
    scheme, netloc, path, _, _ = urlsplit(normalized)
    path = _PERCENT_ENCODED.sub(_normalize_percent_encoding, path)
    return urlunsplit((scheme, netloc, _remove_dot_segments(path), "", ""))


def _normalize_percent_encoding(match: re.Match[str]) -> str:
    """RFC 3986 6.2.2.1 and 6.2.2.2: upper-case hex digits; an unreserved character decoded."""
    character = chr(int(match[1], 16))
    return character if character in _UNRESERVED else "%" + match[1].upper()


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 5.2.4 (6.2.2.3), for an absolute path: `/a/./b/../c` is `/a/c`."""
    segments = path.split("/")[1:]
    output: list[str] = []
    for position, segment in enumerate(segments, 1):
        if segment == "..":
            if output:
                output.pop()
        elif segment != ".":
            output.append(segment)
            continue
        if position == len(segments):  # a trailing `.` or `..` leaves a trailing slash
            output.append("")
    return "/" + "/".join(output)


def _proof_part(segment: str, what: str, *, as_json: bool = True) -> Any:
    """A base64url segment of the proof (RFC 7515 7.1): a JSON object (header, claims), else bytes."""
    try:
        return _json_object(_segment(segment)) if as_json else _segment(segment)
    except TokenError:
        raise DPoPError(f"The DPoP proof's {what} is not valid base64url{'-encoded JSON' * as_json}.") from None


def _public_key(header: Mapping[str, Any], alg: str) -> tuple[dict[str, Any], Any, str]:
    """The header's `jwk`, its key object and its thumbprint: a public key (RFC 9449 4.3 point 7) of
    the type that `alg` signs with."""
    jwk = header.get("jwk")
    if not isinstance(jwk, dict):
        raise DPoPError("The DPoP proof's header has no jwk: the client's public key.")
    if _PRIVATE_MEMBERS & jwk.keys():
        raise DPoPError("The DPoP proof's jwk holds a private key: it must hold the public key only.")
    kty, crv = _KEY_TYPES[alg]
    if jwk.get("kty") != kty or (crv is not None and jwk.get("crv") != crv):
        raise DPoPError(f"The DPoP proof's jwk is not a key for {alg}: {alg} takes {crv or kty} keys.")
    try:
        key, thumbprint = _ALGORITHMS[alg].from_jwk(jwk), jwk_thumbprint(jwk)
    except (PyJWTError, ValueError, TypeError, KeyError, AttributeError):
        raise DPoPError("The DPoP proof's jwk is not a valid public key.") from None
    if kty == "RSA" and key.key_size < _MIN_RSA_BITS:
        raise DPoPError(f"The DPoP proof's RSA key is too short: at least {_MIN_RSA_BITS} bits.")
    return jwk, key, thumbprint


def _checked_header(segment: str) -> tuple[str, dict[str, Any], Any, str]:
    """A proof's protected header (RFC 9449 4.2, 4.3 points 4 to 7): its `alg`, its `jwk`, the key
    object and the key's thumbprint."""
    header = _proof_part(segment, "header")
    if header.get("typ") != PROOF_TYPE:
        raise DPoPError(f"The DPoP proof's typ is not {PROOF_TYPE}.")
    alg = header.get("alg")
    if not isinstance(alg, str) or alg not in _ALGORITHMS:
        raise DPoPError(f"The DPoP proof's alg is not one of {', '.join(DPOP_ALGS)}.")
    if "crit" in header:
        raise DPoPError("The DPoP proof's header has a crit parameter, which this resource does not understand.")
    return (alg, *_public_key(header, alg))


_cached_header = lru_cache(maxsize=HEADER_CACHE_ENTRIES)(_checked_header)  # an error is never cached


def check_proof(proof: str, *, method: str, url: str, now: float, access_token: str | None = None,
                jkt: str | None = None, max_age: int = PROOF_WINDOW, nonce: str | None = None) -> Proof:
    """The checked proof of a request (`method`, `url`), or DPoPError: RFC 9449 4.3. One compact JWS of
    type `dpop+jwt`, signed with an `alg` of DPOP_ALGS by the public key in its header; `jti` a short
    non-empty string; `htm` the method (case-sensitive) and `htu` the URL, compared normalised
    (`normalize_htu`); `iat` at most `max_age` seconds from `now`, either way. With `access_token`,
    `ath` must be its hash (7.1); with `jkt`, the key's thumbprint must be it (the token's `cnf.jkt`,
    6.1); with `nonce`, the proof's `nonce` must be it (8, 9). Replays are `ReplayCache`'s business."""
    if not isinstance(proof, str) or not proof:
        raise DPoPError("A DPoP proof is required: send one in the DPoP header.")
    if len(proof) > MAX_PROOF_CHARS:
        raise DPoPError(f"The DPoP proof is too large: at most {MAX_PROOF_CHARS} characters.")
    parts = proof.split(".")
    if len(parts) != 3 or not all(_BASE64URL.fullmatch(part) for part in parts):
        raise DPoPError("The DPoP proof is not one compact JWS (three base64url parts separated by dots).")
    if len(parts[0]) <= MAX_CACHED_HEADER_CHARS:
        alg, jwk, key, thumbprint = _cached_header(parts[0])
    else:
        alg, jwk, key, thumbprint = _checked_header(parts[0])
    signature = _proof_part(parts[2], "signature", as_json=False)
    if not _ALGORITHMS[alg].verify(f"{parts[0]}.{parts[1]}".encode("ascii"), key, signature):
        raise DPoPError("The DPoP proof's signature does not verify with the key in its header.")
    claims = _proof_part(parts[1], "payload")
    jti, htm, htu, iat = claims.get("jti"), claims.get("htm"), claims.get("htu"), claims.get("iat")
    if not isinstance(jti, str) or not 0 < len(jti) <= MAX_JTI_CHARS:
        raise DPoPError(f"The DPoP proof's jti must be a string of 1 to {MAX_JTI_CHARS} characters.")
    if htm != method:
        raise DPoPError("The DPoP proof's htm is not the method of this request.")
    if not isinstance(htu, str) or not _same_url(htu, url):
        raise DPoPError("The DPoP proof's htu is not the URL of this request.")
    if not _number(iat) or not abs(now - iat) <= max_age:
        raise DPoPError(f"The DPoP proof's iat is not within {max_age} seconds of this server's time.")
    ath = claims.get("ath")
    if access_token is not None and not (access_token.isascii() and _same(ath, access_token_hash(access_token))):
        raise DPoPError("The DPoP proof's ath is missing or is not the hash of the access token it came with.")
    if jkt is not None and not _same(thumbprint, jkt):
        raise DPoPError("The DPoP proof is signed by another key than the one the access token is bound to.")
    proof_nonce = claims.get("nonce")
    if nonce is not None and not _same(proof_nonce, nonce):
        raise DPoPError("The DPoP proof's nonce is not the one this server gave.")
    return Proof(jkt=thumbprint, jti=jti, iat=iat, htm=htm, htu=htu, alg=alg,
                 ath=ath if isinstance(ath, str) else None,
                 nonce=proof_nonce if isinstance(proof_nonce, str) else None, jwk=dict(jwk))


def _same_url(htu: str, url: str) -> bool:
    """Do `htu` and the request's URL name the same target (RFC 9449 4.3 point 9)?"""
    try:
        return _normalized(htu) == _normalized(url)
    except ValueError:
        return False


_normalized = lru_cache(maxsize=URL_CACHE_ENTRIES)(normalize_htu)


def token_jkt(claims: Mapping[str, Any]) -> str | None:
    """The key a token is bound to (RFC 9449 6.1: `cnf.jkt`), None for an unbound token. A `cnf`
    without a usable `jkt` (another kind of binding) is refused: it cannot be checked here."""
    if "cnf" not in claims:
        return None
    cnf = claims["cnf"]
    jkt = cnf.get("jkt") if isinstance(cnf, dict) else None
    if not isinstance(jkt, str) or not jkt:
        raise invalid_token("The access token is bound to its client in a way this resource cannot check.")
    return jkt


class ReplayCache:
    """The `jti`s of the proofs accepted within the proof window, in this process (RFC 9449 11.1):
    a proof used twice is refused. Each is kept until its `iat` + `window`, when `check_proof` would
    refuse it anyway. At most `max_entries`: when full, new proofs are refused rather than old ones
    forgotten. Thread-safe."""

    def __init__(self, window: float = PROOF_WINDOW, max_entries: int = MAX_REPLAY_ENTRIES) -> None:
        self.window, self.max_entries = window, max_entries
        self._expiries: dict[str, float] = {}
        self._queue: list[tuple[float, str]] = []  # a heap of (expiry, jti)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._expiries)

    @property
    def full(self) -> bool:
        return len(self._expiries) >= self.max_entries

    def first_use(self, jti: str, iat: float, now: float) -> bool:
        """True the first time `jti` is seen (it is remembered until `iat` + `window`); False for a
        replay, or when the cache is full."""
        with self._lock:
            while self._queue and self._queue[0][0] < now:
                del self._expiries[heapq.heappop(self._queue)[1]]
            if jti in self._expiries or self.full:
                return False
            expiry = iat + self.window
            self._expiries[jti] = expiry
            heapq.heappush(self._queue, (expiry, jti))
            return True
