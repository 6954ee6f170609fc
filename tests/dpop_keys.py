"""A DPoP client's key and proofs (RFC 9449 4), made here with PyJWT and cryptography from the
RFC's words, not with lbauth's code: what a real client sends."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _int(value: int) -> str:
    return _b64(value.to_bytes((value.bit_length() + 7) // 8, "big"))


class DPoPKey:
    """A key pair of `alg` (ES256, EdDSA or RS256): its public JWK, its RFC 7638 thumbprint, proofs."""

    def __init__(self, alg: str = "ES256") -> None:
        self.alg = alg
        if alg == "ES256":
            self.private = ec.generate_private_key(ec.SECP256R1())
            numbers = self.private.public_key().public_numbers()
            self.jwk = {"kty": "EC", "crv": "P-256", "x": _b64(numbers.x.to_bytes(32, "big")),
                        "y": _b64(numbers.y.to_bytes(32, "big"))}
            members = ("crv", "kty", "x", "y")
        elif alg == "EdDSA":
            self.private = ed25519.Ed25519PrivateKey.generate()
            raw = self.private.public_key().public_bytes_raw()
            self.jwk = {"kty": "OKP", "crv": "Ed25519", "x": _b64(raw)}
            members = ("crv", "kty", "x")
        else:
            self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            numbers = self.private.public_key().public_numbers()
            self.jwk = {"kty": "RSA", "n": _int(numbers.n), "e": _int(numbers.e)}
            members = ("e", "kty", "n")
        canonical = json.dumps({m: self.jwk[m] for m in members}, separators=(",", ":"), sort_keys=True)
        self.jkt = _b64(hashlib.sha256(canonical.encode()).digest())  # RFC 7638 3

    def proof(self, method: str, url: str, now: float, *, access_token: str | None = None,
              jti: str | None = None, **extra: Any) -> str:
        """A proof for `method` `url` made at `now` (the server's clock: the tests' is frozen)."""
        claims: dict[str, Any] = {"jti": jti or secrets.token_urlsafe(16), "htm": method, "htu": url,
                                  "iat": int(now), **extra}
        if access_token is not None:
            claims["ath"] = _b64(hashlib.sha256(access_token.encode()).digest())
        return jwt.encode(claims, self.private, algorithm=self.alg, headers={"typ": "dpop+jwt", "jwk": self.jwk})
