"""Offline verification of lbauth access tokens, for resource services (contract sections 6 and 9).

An access token is `lba_at_` + a compact JWS in the RFC 9068 profile. This package imports only the
standard library, PyJWT and cryptography, nothing else of lbauth. The server checks its own tokens
with the same `decode_access_token` and the same `CheckList`.

    verifier = Verifier("https://auth.example.com", audience="https://auth.example.com")
    verifier.start()                       # fetch keys and revocations now, then in the background
    claims = verifier.verify(token, required_scopes=["userinfo"])   # no I/O; raises TokenError
    verifier.close()

Tornado handlers: decorate a method with `@requires_token(verifier, "scope", ...)`; the claims
are then `self.token_claims`, and a refused request gets the lbauth error envelope and the
RFC 6750 `WWW-Authenticate` header.

Modules: `claims` (the token check, pure), `checklist` (revocations), `discovery` (RFC 8414
metadata), `keys` (the JWKS cache), `feed` (the revocation feed), `verifier` (the three together),
`tornado` (the decorator).
"""

from lbauth.verify.checklist import CheckList, Entry
from lbauth.verify.claims import (
    ALLOWED_ALGS,
    MAX_LEEWAY,
    PREFIX,
    REQUIRED_CLAIMS,
    TOKEN_TYPES,
    TokenError,
    check_times,
    decode_access_token,
    require_scopes,
)
from lbauth.verify.discovery import metadata_url
from lbauth.verify.tornado import requires_token
from lbauth.verify.verifier import Verifier

__all__ = [
    "ALLOWED_ALGS", "MAX_LEEWAY", "PREFIX", "REQUIRED_CLAIMS", "TOKEN_TYPES", "CheckList", "Entry", "TokenError",
    "Verifier", "check_times", "decode_access_token", "metadata_url", "require_scopes", "requires_token",
]
