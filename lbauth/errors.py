"""Every error lbauth reports, one class per subCode (contract section 3).

The domain core raises these; only the HTTP layer renders them, as the envelope
`{"code": N, "message": "...", "subCode": "..."}` with HTTP status N. Messages are fixed,
human-readable text: they never carry a token, code, secret or password.
This module imports only the standard library (lbauth.verify depends on it).
"""

from __future__ import annotations


class LbauthError(Exception):
    status: int = 400
    sub_code: str = "request.invalid"
    message: str = "The request is invalid."

    def __init__(self, message: str | None = None, *, headers: dict[str, str] | None = None) -> None:
        if message is not None:
            self.message = message
        self.headers = dict(headers or {})
        super().__init__(self.message)

    def envelope(self) -> dict:
        return {"code": self.status, "message": self.message, "subCode": self.sub_code}


_BY_SUB_CODE: dict[str, type[LbauthError]] = {}


def _error(name: str, status: int, sub_code: str, message: str) -> type[LbauthError]:
    cls = type(name, (LbauthError,), {"status": status, "sub_code": sub_code, "message": message})
    _BY_SUB_CODE[sub_code] = cls
    return cls


def by_sub_code(sub_code: str) -> type[LbauthError]:
    """The error class of a subCode (for errors reported by lbauth.verify)."""
    return _BY_SUB_CODE[sub_code]


# Requests in general
ValidationFailed = _error("ValidationFailed", 400, "request.validation_failed", "Field required")
NotFound = _error("NotFound", 404, "request.not_found", "No such resource.")
MethodNotAllowed = _error("MethodNotAllowed", 405, "request.method_not_allowed",
                          "This method is not allowed on this resource.")
RequestTooLarge = _error("RequestTooLarge", 413, "request.too_large", "The request body is too large.")
RateLimited = _error("RateLimited", 429, "request.rate_limited", "Too many requests; retry later.")
ServerUnavailable = _error("ServerUnavailable", 503, "server.unavailable",
                           "The service is temporarily unavailable; retry later.")
FormExpired = _error("FormExpired", 403, "request.xsrf_failed",
                     "This form has expired or did not come from this site. Reload the page and try again.")
InternalError = _error("InternalError", 500, "server.internal_error", "An internal error occurred.")

# Authorization (spec 4.2, 7)
ApplicationNotFound = _error("ApplicationNotFound", 404, "oauth2.application.not_found",
                             "The application does not exist.")
RedirectUriMismatch = _error("RedirectUriMismatch", 400, "oauth2.redirect_uri.mismatch",
                             "The redirect URI does not match the application's configuration.")
ScopeInvalid = _error("ScopeInvalid", 400, "oauth2.scope.invalid", "The requested scope is invalid.")
AuthorizationNotFound = _error("AuthorizationNotFound", 404, "oauth2.authorization.not_found",
                               "You have not authorized this application.")

# Token endpoints (spec 4.3, 4.4)
GrantTypeInvalid = _error("GrantTypeInvalid", 400, "oauth2.grant_type.invalid", "The grant_type is invalid.")
CodeInvalid = _error("CodeInvalid", 400, "oauth2.code.invalid", "The authorization code is invalid.")
CodeExpired = _error("CodeExpired", 400, "oauth2.code.expired", "The authorization code has expired.")
CodeUsed = _error("CodeUsed", 400, "oauth2.code.used", "The authorization code has already been used.")
CodeVerifierInvalid = _error("CodeVerifierInvalid", 400, "oauth2.code_verifier.invalid",
                             "The PKCE code_verifier does not match the code challenge.")
ClientSecretMismatch = _error("ClientSecretMismatch", 401, "oauth2.client.secret_mismatch",
                              "The client credentials are not valid.")
RefreshTokenInvalid = _error("RefreshTokenInvalid", 400, "oauth2.refresh_token.invalid",
                             "The refresh token is invalid.")
RefreshTokenExpired = _error("RefreshTokenExpired", 400, "oauth2.refresh_token.expired",
                             "The refresh token has expired.")
RefreshTokenRevoked = _error("RefreshTokenRevoked", 400, "oauth2.refresh_token.revoked",
                             "The refresh token has been revoked.")

# Bearer-protected endpoints (spec 5, RFC 6750)
TokenMissing = _error("TokenMissing", 401, "oauth2.token.missing",
                      "A bearer token is required (Authorization: Bearer <token>).")
TokenInvalid = _error("TokenInvalid", 401, "oauth2.token.invalid", "The access token is invalid.")
TokenExpired = _error("TokenExpired", 401, "oauth2.token.expired", "The access token has expired.")
TokenRevoked = _error("TokenRevoked", 401, "oauth2.token.revoked", "The access token has been revoked.")
ScopeInsufficient = _error("ScopeInsufficient", 403, "oauth2.scope.insufficient",
                           "The access token does not carry the scope this resource needs.")

# Users (contract 4)
LoginFailed = _error("LoginFailed", 401, "auth.login.failed", "The email or password is wrong.")
Conflict = _error("Conflict", 409, "request.conflict", "The resource already exists.")
