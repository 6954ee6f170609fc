"""Every error lbauth reports, one class per subCode (contract section 3).

The domain core raises these; only the HTTP layer renders them: as the envelope
`{"code": N, "message": "...", "subCode": "..."}` with HTTP status N on /api/, as
`{"error": rfc_error, "error_description": message}` on the RFC endpoints, and as `error` at the
client's redirect URI when `redirectable` (`AuthorizationRedirect`). Messages are fixed,
human-readable text: they never carry a token, code, secret or password.
Standard library only. lbauth.verify has its own `TokenError`; `by_sub_code` maps it to a class here.
"""

from __future__ import annotations

from typing import Any, ClassVar

_BY_SUB_CODE: dict[str, type[LbauthError]] = {}
DPOP_ALGS = "ES256 EdDSA RS256"  # the DPoP proofs accepted (RFC 9449 7.1 `algs`), as lbauth.verify's


class LbauthError(Exception):
    """`status` is the HTTP status and envelope `code`; `rfc_error` the OAuth error code (RFC 6749
    4.1.2.1 and 5.2, RFC 6750 3.1, RFC 7009, RFC 7591 3.2.2, OpenID Connect Core 3.1.2.6)."""

    status: int = 400
    sub_code: ClassVar[str] = "request.invalid"
    message: str = "The request is invalid."
    rfc_error: ClassVar[str] = "invalid_request"
    # May the client hear it at its redirect URI (RFC 6749 4.1.2.1)? Not when the client or the
    # redirect URI itself is in doubt: the authorization page then shows an error page with
    # `page_status` instead (contract 5). None: `status`.
    redirectable: ClassVar[bool] = True
    page_status: ClassVar[int | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "sub_code" in cls.__dict__:
            _BY_SUB_CODE[cls.sub_code] = cls

    def __init__(self, message: str | None = None, *, headers: dict[str, str] | None = None) -> None:
        if message is not None:
            self.message = message
        self.headers = dict(headers or {})
        super().__init__(self.message)

    def envelope(self) -> dict[str, Any]:
        return {"code": self.status, "message": self.message, "subCode": self.sub_code}


def by_sub_code(sub_code: str) -> type[LbauthError]:
    """The error class of a subCode (for errors reported by lbauth.verify)."""
    return _BY_SUB_CODE[sub_code]


class AuthorizationRedirect(Exception):
    """An authorization request's error the client learns at its redirect URI (RFC 6749 4.1.2.1)."""

    def __init__(self, error: LbauthError, redirect_uri: str, state: str | None) -> None:
        assert error.redirectable, error.sub_code
        super().__init__(error.message)
        self.error, self.redirect_uri, self.state = error, redirect_uri, state

    def params(self) -> dict[str, str | None]:
        return {"error": self.error.rfc_error, "error_description": self.error.message, "state": self.state}


# ---- requests in general ----------------------------------------------------------------------------

class ValidationFailed(LbauthError):
    """`field`: the input refused, when one is to blame (a page shows the message beside it)."""
    sub_code, message = "request.validation_failed", "Field required"

    def __init__(self, message: str | None = None, *, field: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message, headers=headers)
        self.field = field


class MalformedRequest(ValidationFailed):
    """A request Tornado refused before our code saw it: `request.validation_failed` with its status."""

    def __init__(self, status: int) -> None:
        super().__init__("The request is malformed.")
        self.status = status


class NotFound(LbauthError):
    status, sub_code, message = 404, "request.not_found", "No such resource."


class MethodNotAllowed(LbauthError):
    status, sub_code, message = 405, "request.method_not_allowed", "This method is not allowed on this resource."


class RequestTooLarge(LbauthError):
    status, sub_code, message = 413, "request.too_large", "The request body is too large."


class RateLimited(LbauthError):
    status, sub_code, message = 429, "request.rate_limited", "Too many requests; retry later."


class ServerUnavailable(LbauthError):
    status, sub_code, rfc_error = 503, "server.unavailable", "temporarily_unavailable"
    message = "The service is temporarily unavailable; retry later."


class FormExpired(LbauthError):
    status, sub_code = 403, "request.xsrf_failed"
    message = "This form has expired or did not come from this site. Reload the page and try again."


class InternalError(LbauthError):
    status, sub_code, rfc_error = 500, "server.internal_error", "server_error"
    message = "An internal error occurred."


# ---- authorization (spec 4.1, 4.2, 7; RFC 6749 4.1.2.1) ---------------------------------------------

class UntrustedClientRequest(LbauthError):
    """A bad client or redirect URI: never redirected to; the authorization page answers 400 (contract 5)."""
    redirectable, page_status = False, 400


class ApplicationNotFound(UntrustedClientRequest):
    status, sub_code, message = 404, "oauth2.application.not_found", "The application does not exist."


class RedirectUriMismatch(UntrustedClientRequest):
    """At the token endpoint: not the authorization request's redirect URI (RFC 6749 4.1.3, 5.2)."""
    sub_code, rfc_error = "oauth2.redirect_uri.mismatch", "invalid_grant"
    message = "The redirect URI does not match the application's configuration."


class ClientDocumentInvalid(UntrustedClientRequest):
    """A client id naming a metadata document that cannot be used (contract 17): the error page
    says what was wrong with it."""
    sub_code, rfc_error = "oauth2.client_document.invalid", "invalid_client"
    message = "The client's metadata document cannot be used."

    @classmethod
    def because(cls, reason: str) -> ClientDocumentInvalid:
        return cls(f"The client's metadata document (its client_id URL) cannot be used: {reason}.")


class ScopeInvalid(LbauthError):
    sub_code, rfc_error, message = "oauth2.scope.invalid", "invalid_scope", "The requested scope is invalid."


class ResponseTypeUnsupported(LbauthError):
    sub_code, rfc_error = "oauth2.response_type.unsupported", "unsupported_response_type"
    message = "Only response_type=code is supported"


class AccessDenied(LbauthError):
    status, sub_code, rfc_error = 403, "oauth2.authorization.denied", "access_denied"
    message = "The user denied the request."


class AuthorizationNotFound(LbauthError):
    status, sub_code, message = 404, "oauth2.authorization.not_found", "You have not authorized this application."


class InteractionRequired(LbauthError):
    """prompt=none, but the user would have to act (OpenID Connect Core 3.1.2.6)."""
    sub_code, rfc_error = "oauth2.interaction.required", "interaction_required"
    message = "The user must interact with the authorization server."


class LoginRequired(InteractionRequired):
    sub_code, rfc_error, message = "oauth2.login.required", "login_required", "The user must sign in."


class UnmetAuthenticationRequirements(LbauthError):
    """`acr_values` asked for a sign-in this user cannot make (no such factor): OpenID Connect
    Core Unmet Authentication Requirements 1.0."""
    sub_code, rfc_error = "oauth2.authentication.unmet", "unmet_authentication_requirements"
    message = "The user cannot sign in the way this app asked for (acr_values)."


class ConsentRequired(InteractionRequired):
    sub_code, rfc_error, message = "oauth2.consent.required", "consent_required", "The user must approve this app."


class RequestNotSupported(LbauthError):
    """OpenID Connect Core 3.1.2.6; RFC 9101: no request objects (contract 15)."""
    sub_code, rfc_error = "oauth2.request.not_supported", "request_not_supported"
    message = "Request objects (the request parameter) are not supported."


class RequestUriNotSupported(LbauthError):
    sub_code, rfc_error = "oauth2.request_uri.not_supported", "request_uri_not_supported"
    message = "Request objects by reference (the request_uri parameter) are not supported."


class RequestUriInvalid(UntrustedClientRequest):
    """RFC 9126 4, RFC 9101 6.2: a pushed request's `request_uri` that is unknown, expired, spent
    or another client's; an error page, since nothing of the request can be trusted."""
    sub_code, rfc_error = "oauth2.request_uri.invalid", "invalid_request_uri"
    message = "The pushed authorization request has expired or was already used: the app must start again."


class PushedRequestRequired(LbauthError):
    """RFC 9126 5: this app sends its authorization requests by pushing them first."""
    sub_code = "oauth2.pushed_request.required"
    message = "This application must push its authorization requests first (pushed authorization requests)."


class TargetInvalid(LbauthError):
    """RFC 8707 2: a resource indicator this server does not know, or the client may not ask for."""
    sub_code, rfc_error, message = "oauth2.target.invalid", "invalid_target", "The requested resource is invalid."


# ---- token endpoints (spec 4.3, 4.4; RFC 6749 5.2) --------------------------------------------------

class GrantTypeInvalid(LbauthError):
    sub_code, rfc_error, message = "oauth2.grant_type.invalid", "unsupported_grant_type", "The grant_type is invalid."


class ClientSecretMismatch(LbauthError):
    status, sub_code, rfc_error = 401, "oauth2.client.secret_mismatch", "invalid_client"
    message = "The client credentials are not valid."


class InvalidGrant(LbauthError):
    """The code or refresh token is not good for this client (RFC 6749 5.2 invalid_grant)."""
    rfc_error = "invalid_grant"


class CodeInvalid(InvalidGrant):
    sub_code, message = "oauth2.code.invalid", "The authorization code is invalid."


class CodeExpired(InvalidGrant):
    sub_code, message = "oauth2.code.expired", "The authorization code has expired."


class CodeUsed(InvalidGrant):
    sub_code, message = "oauth2.code.used", "The authorization code has already been used."


class CodeVerifierInvalid(InvalidGrant):
    sub_code, message = "oauth2.code_verifier.invalid", "The PKCE code_verifier does not match the code challenge."


class RefreshTokenInvalid(InvalidGrant):
    sub_code, message = "oauth2.refresh_token.invalid", "The refresh token is invalid."


class RefreshTokenExpired(InvalidGrant):
    sub_code, message = "oauth2.refresh_token.expired", "The refresh token has expired."


class RefreshTokenRevoked(InvalidGrant):
    sub_code, message = "oauth2.refresh_token.revoked", "The refresh token has been revoked."


class UnauthorizedClient(LbauthError):
    """RFC 6749 5.2: this client is not registered for the grant type it uses (the device grant)."""
    sub_code, rfc_error = "oauth2.client.unauthorized", "unauthorized_client"
    message = "This client is not registered for this grant type."


# ---- the device grant (RFC 8628 3.5) ----------------------------------------------------------------

class AuthorizationPending(LbauthError):
    """The user has not approved or denied yet: the device polls again after `interval`."""
    sub_code, rfc_error = "oauth2.device.authorization_pending", "authorization_pending"
    message = "The user has not answered yet; poll again after the interval."


class SlowDown(AuthorizationPending):
    """Still pending, but polled sooner than `interval` after the last poll, which grows by 5 s."""
    sub_code, rfc_error = "oauth2.device.slow_down", "slow_down"
    message = "Polled too often: wait 5 seconds more between polls from now on."


class ExpiredToken(LbauthError):
    """The device code's 10 minutes are over: the device starts again."""
    sub_code, rfc_error = "oauth2.device_code.expired", "expired_token"
    message = "The device code has expired; start a new device authorization."


class DeviceAccessDenied(AccessDenied):
    """The user denied the device's request (or revoked the app meanwhile): access_denied, with
    the token endpoint's status, 400 (RFC 6749 5.2)."""
    status = 400


class DeviceCodeInvalid(InvalidGrant):
    """Unknown, or issued to another client: as good as none."""
    sub_code, message = "oauth2.device_code.invalid", "The device code is invalid."


class DeviceCodeUsed(InvalidGrant):
    sub_code, message = "oauth2.device_code.used", "The device code has already been used."


class UserCodeInvalid(LbauthError):
    """A code typed at {auth_url}/device that no pending device request has (RFC 8628 3.3)."""
    sub_code = "oauth2.user_code.invalid"
    message = "This code is not valid or has expired. Check the code on your device and try again."


# ---- bearer-protected endpoints (spec 5, RFC 6750 3.1) ----------------------------------------------

class BearerTokenError(LbauthError):
    """Answered with an RFC 6750 3 `WWW-Authenticate` challenge naming `rfc_error`."""
    status, rfc_error = 401, "invalid_token"

    @property
    def challenge(self) -> str:
        return f'Bearer error="{self.rfc_error}"'


class DPoPProofInvalid(BearerTokenError):
    """RFC 9449 7.1: a DPoP proof that is missing, malformed, for another request, too old, used
    before, or made with another key than the token's; answered with the `DPoP` challenge."""
    sub_code, rfc_error = "oauth2.dpop.invalid_proof", "invalid_dpop_proof"
    message = "The DPoP proof is not valid."

    @property
    def challenge(self) -> str:
        return f'DPoP error="invalid_dpop_proof", algs="{DPOP_ALGS}"'


class DPoPProofRefused(DPoPProofInvalid):
    """RFC 9449 5: the same at the token endpoint, where it is a 400 like every grant error."""
    status = 400


class DPoPBoundTokenAsBearer(BearerTokenError):
    """RFC 9449 7.2: a DPoP-bound access token sent as a Bearer token."""
    message = "This access token is DPoP-bound: send it as Authorization: DPoP, with a DPoP proof."

    @property
    def challenge(self) -> str:
        return f'DPoP error="invalid_token", algs="{DPOP_ALGS}"'


class TokenMissing(BearerTokenError):
    sub_code, message = "oauth2.token.missing", "A bearer token is required (Authorization: Bearer <token>)."
    rfc_error = "invalid_request"

    @property
    def challenge(self) -> str:
        return "Bearer"  # RFC 6750 3.1: no error code when the request carried no token


class TokenInvalid(BearerTokenError):
    sub_code, message = "oauth2.token.invalid", "The access token is invalid."


class TokenExpired(BearerTokenError):
    sub_code, message = "oauth2.token.expired", "The access token has expired."


class TokenRevoked(BearerTokenError):
    sub_code, message = "oauth2.token.revoked", "The access token has been revoked."


class ScopeInsufficient(BearerTokenError):
    status, sub_code, rfc_error = 403, "oauth2.scope.insufficient", "insufficient_scope"
    message = "The access token does not carry the scope this resource needs."


# ---- client registration (RFC 7591 3.2.2) ---------------------------------------------------------

class ClientMetadataInvalid(LbauthError):
    sub_code, rfc_error = "oauth2.client_metadata.invalid", "invalid_client_metadata"
    message = "The client metadata is invalid."


class RedirectUriInvalid(ClientMetadataInvalid):
    sub_code, rfc_error, message = "oauth2.redirect_uri.invalid", "invalid_redirect_uri", "A redirect URI is invalid."


# ---- users (contract 4) -----------------------------------------------------------------------------

class LoginFailed(LbauthError):
    status, sub_code, message = 401, "auth.login.failed", "The email or password is wrong."


class Conflict(LbauthError):
    status, sub_code, message = 409, "request.conflict", "The resource already exists."


# ---- accounts and sessions (contract 16) ------------------------------------------------------------

class SessionNotFound(LbauthError):
    """Also for another user's session: its existence is never confirmed."""
    status, sub_code, message = 404, "auth.session.not_found", "No such session of yours."


class PasswordWeak(LbauthError):
    """Raised with the reason (core/accounts/passwords.py `weakness`); the default sums up the policy."""
    sub_code = "account.password.weak"
    message = ("The new password must be 10 to 256 characters, must not contain your email or name, "
               "and must not be a known breached password.")


class UserNotFound(LbauthError):
    status, sub_code, message = 404, "user.not_found", "No user has this email."


# ---- sign-up, email and recovery (contract 18) -----------------------------------------------------

class ResetInvalid(LbauthError):
    """A reset link's token that is unknown, used, voided by a newer request, or expired."""
    sub_code = "auth.reset.invalid"
    message = "This password reset link is invalid, used or expired; ask for a new one."


class LinkInvalid(LbauthError):
    """A sign-up, verification or email-change link's token that is unknown, used or expired."""
    sub_code = "auth.link.invalid"
    message = "This link is invalid, used or expired."


class MailOff(NotFound):
    """Sign-up or recovery on a server that sends no mail, or whose sign-up is off: not offered."""
    message = "This server does not offer this."


# ---- second factors (contract 19) ---------------------------------------------------------------

class MfaFailed(LbauthError):
    """A wrong second step: a wrong code, or an mfaToken that is unknown, used or expired."""
    status, sub_code, message = 401, "auth.mfa.failed", "The second step failed: check the code and try again."


class ReauthenticationRequired(LbauthError):
    """Removing a factor or regenerating recovery codes needs a sign-in within the last 5 minutes."""
    status, sub_code, message = 403, "auth.reauthentication.required", "Sign in again first, then retry."


class MfaEnrolmentRequired(LbauthError):
    """LBAUTH_MFA=required: a user without a second factor must enrol one first."""
    status, sub_code = 403, "auth.mfa.enrolment_required"
    message = "This server requires a second factor: set one up at /api/account/security/totp first."


class TotpExists(LbauthError):
    """Enrolling TOTP while a confirmed authenticator exists: remove it first."""
    status, sub_code = 409, "account.totp.exists"
    message = "An authenticator app is set up already; remove it before adding another."


class TotpNotFound(LbauthError):
    status, sub_code = 404, "account.totp.not_found"
    message = "No authenticator app is set up (or waiting for its code)."


class SessionRequired(LbauthError):
    """A page's script called the server without a live session cookie (it ended meanwhile)."""
    status, sub_code, message = 401, "auth.session.required", "Your session has ended: sign in again."


class PasskeyNotFound(LbauthError):
    status, sub_code, message = 404, "account.passkey.not_found", "No such passkey on this account."


class PasskeyRefused(LbauthError):
    """A new passkey that cannot be added: its ceremony expired or was used, the browser's answer
    does not verify, or the credential is registered already."""
    status, sub_code = 400, "account.passkey.invalid"
    message = "This passkey could not be added; try again."
