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

Step-up (RFC 9470): `verify(token, scopes, acr_values=("phr",), max_age=300)` and
`requires_token(verifier, "scope", acr_values=..., max_age=...)` refuse a token whose sign-in is
too weak (`acr`) or too old (`auth_time`) with 401 `oauth2.token.insufficient_user_authentication`
and the RFC 9470 3 challenge. The claims `verify` returns are an `AccessTokenClaims`, a dict with
read-only `acr`, `amr`, `auth_time`, `scopes` and `subject`.

Resource services (RFC 9728, RFC 8707; contract 17): `Verifier(issuer, audience=RESOURCE)` accepts
only tokens for that resource (compared after RFC 3986 6.2.2 normalisation); `resource_metadata`
is the protected-resource document, `resource_metadata_route` a Tornado rule serving it, and
`requires_token(..., resource_metadata=URL)` names it in its 401 and 403 challenges.

DPoP (RFC 9449): a token whose claims hold `cnf.jkt` is bound to the client's key. `requires_token`
takes it in `Authorization: DPoP` with a `DPoP` proof header; other frameworks call
`verify(token, scopes, dpop=DPoPRequest(method, url, proof))`. The proof's signature, `htm`, `htu`,
`iat` (within 60 s), `ath` and key (`cnf.jkt`) are checked, and its `jti` must not have been seen
in this process within that window (`ReplayCache`). A bad proof is 401 `oauth2.dpop.invalid_proof`
(`DPoPError`), challenged `DPoP error="invalid_dpop_proof", ..., algs="ES256 EdDSA RS256"`; a bound
token sent as Bearer is refused. `check_proof` is the proof check alone, pure.

Modules: `claims` (the token check, pure), `checklist` (revocations), `discovery` (RFC 8414
metadata), `keys` (the JWKS cache), `feed` (the revocation feed), `verifier` (the three together),
`resources` (resource URIs and RFC 9728 metadata, pure), `dpop` (DPoP proofs, pure but for the replay
cache), `tornado` (the decorator and metadata handler).
"""

from lbauth.verify.checklist import CheckList, Entry
from lbauth.verify.claims import (
    ALLOWED_ALGS,
    INSUFFICIENT_USER_AUTHENTICATION,
    MAX_LEEWAY,
    PREFIX,
    REQUIRED_CLAIMS,
    TOKEN_TYPES,
    AccessTokenClaims,
    TokenError,
    check_times,
    decode_access_token,
    require_authentication,
    require_scopes,
    step_up_requirements,
)
from lbauth.verify.discovery import metadata_url
from lbauth.verify.dpop import (
    DPOP_ALGS,
    DPoPError,
    DPoPRequest,
    ReplayCache,
    access_token_hash,
    check_proof,
    jwk_thumbprint,
    normalize_htu,
)
from lbauth.verify.resources import metadata_url as resource_metadata_url
from lbauth.verify.resources import normalize as normalize_resource
from lbauth.verify.resources import resource_metadata
from lbauth.verify.tornado import ResourceMetadataMixin, requires_token, resource_metadata_route
from lbauth.verify.verifier import Verifier

__all__ = [
    "ALLOWED_ALGS", "DPOP_ALGS", "INSUFFICIENT_USER_AUTHENTICATION", "MAX_LEEWAY", "PREFIX", "REQUIRED_CLAIMS",
    "TOKEN_TYPES", "AccessTokenClaims", "CheckList", "DPoPError", "DPoPRequest", "Entry", "ReplayCache", "TokenError",
    "ResourceMetadataMixin", "Verifier", "access_token_hash", "check_proof", "check_times", "decode_access_token",
    "jwk_thumbprint", "metadata_url", "normalize_htu", "normalize_resource", "require_authentication",
    "require_scopes", "requires_token", "resource_metadata", "resource_metadata_route", "resource_metadata_url",
    "step_up_requirements",
]
