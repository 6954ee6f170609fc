"""The error model (contract section 3; RFC 6749 4.1.2.1 and 5.2, RFC 6750 3.1, RFC 7591 3.2.2,
RFC 8707 2, OpenID Connect Core 3.1.2.6): every class's status, subCode, RFC error code and
whether the client may hear it at its redirect URI."""

from __future__ import annotations

import pytest

from lbauth import errors

# class: (status, subCode, RFC error code, redirectable)
EXPECTED = {
    errors.ValidationFailed: (400, "request.validation_failed", "invalid_request", True),
    errors.NotFound: (404, "request.not_found", "invalid_request", True),
    errors.MethodNotAllowed: (405, "request.method_not_allowed", "invalid_request", True),
    errors.RequestTooLarge: (413, "request.too_large", "invalid_request", True),
    errors.RateLimited: (429, "request.rate_limited", "invalid_request", True),
    errors.ServerUnavailable: (503, "server.unavailable", "temporarily_unavailable", True),
    errors.FormExpired: (403, "request.xsrf_failed", "invalid_request", True),
    errors.InternalError: (500, "server.internal_error", "server_error", True),
    errors.ApplicationNotFound: (404, "oauth2.application.not_found", "invalid_request", False),
    errors.RedirectUriMismatch: (400, "oauth2.redirect_uri.mismatch", "invalid_grant", False),
    errors.ClientDocumentInvalid: (400, "oauth2.client_document.invalid", "invalid_client", False),
    errors.ScopeInvalid: (400, "oauth2.scope.invalid", "invalid_scope", True),
    errors.ResponseTypeUnsupported: (400, "oauth2.response_type.unsupported", "unsupported_response_type", True),
    errors.AccessDenied: (403, "oauth2.authorization.denied", "access_denied", True),
    errors.AuthorizationNotFound: (404, "oauth2.authorization.not_found", "invalid_request", True),
    errors.InteractionRequired: (400, "oauth2.interaction.required", "interaction_required", True),
    errors.LoginRequired: (400, "oauth2.login.required", "login_required", True),
    errors.ConsentRequired: (400, "oauth2.consent.required", "consent_required", True),
    errors.RequestNotSupported: (400, "oauth2.request.not_supported", "request_not_supported", True),
    errors.RequestUriNotSupported: (400, "oauth2.request_uri.not_supported", "request_uri_not_supported", True),
    errors.DPoPProofInvalid: (401, "oauth2.dpop.invalid_proof", "invalid_dpop_proof", True),
    errors.RequestUriInvalid: (400, "oauth2.request_uri.invalid", "invalid_request_uri", False),
    errors.PushedRequestRequired: (400, "oauth2.pushed_request.required", "invalid_request", True),
    errors.TargetInvalid: (400, "oauth2.target.invalid", "invalid_target", True),
    errors.GrantTypeInvalid: (400, "oauth2.grant_type.invalid", "unsupported_grant_type", True),
    errors.ClientSecretMismatch: (401, "oauth2.client.secret_mismatch", "invalid_client", True),
    errors.CodeInvalid: (400, "oauth2.code.invalid", "invalid_grant", True),
    errors.CodeExpired: (400, "oauth2.code.expired", "invalid_grant", True),
    errors.CodeUsed: (400, "oauth2.code.used", "invalid_grant", True),
    errors.CodeVerifierInvalid: (400, "oauth2.code_verifier.invalid", "invalid_grant", True),
    errors.RefreshTokenInvalid: (400, "oauth2.refresh_token.invalid", "invalid_grant", True),
    errors.RefreshTokenExpired: (400, "oauth2.refresh_token.expired", "invalid_grant", True),
    errors.RefreshTokenRevoked: (400, "oauth2.refresh_token.revoked", "invalid_grant", True),
    errors.UnauthorizedClient: (400, "oauth2.client.unauthorized", "unauthorized_client", True),
    errors.AuthorizationPending: (400, "oauth2.device.authorization_pending", "authorization_pending", True),
    errors.SlowDown: (400, "oauth2.device.slow_down", "slow_down", True),
    errors.ExpiredToken: (400, "oauth2.device_code.expired", "expired_token", True),
    errors.DeviceCodeInvalid: (400, "oauth2.device_code.invalid", "invalid_grant", True),
    errors.DeviceCodeUsed: (400, "oauth2.device_code.used", "invalid_grant", True),
    errors.UserCodeInvalid: (400, "oauth2.user_code.invalid", "invalid_request", True),
    errors.TokenMissing: (401, "oauth2.token.missing", "invalid_request", True),
    errors.TokenInvalid: (401, "oauth2.token.invalid", "invalid_token", True),
    errors.TokenExpired: (401, "oauth2.token.expired", "invalid_token", True),
    errors.TokenRevoked: (401, "oauth2.token.revoked", "invalid_token", True),
    errors.ScopeInsufficient: (403, "oauth2.scope.insufficient", "insufficient_scope", True),
    errors.ClientMetadataInvalid: (400, "oauth2.client_metadata.invalid", "invalid_client_metadata", True),
    errors.RedirectUriInvalid: (400, "oauth2.redirect_uri.invalid", "invalid_redirect_uri", True),
    errors.LoginFailed: (401, "auth.login.failed", "invalid_request", True),
    errors.Conflict: (409, "request.conflict", "invalid_request", True),
    errors.SessionNotFound: (404, "auth.session.not_found", "invalid_request", True),
    errors.PasswordWeak: (400, "account.password.weak", "invalid_request", True),
    errors.UserNotFound: (404, "user.not_found", "invalid_request", True),
    errors.ResetInvalid: (400, "auth.reset.invalid", "invalid_request", True),
    errors.LinkInvalid: (400, "auth.link.invalid", "invalid_request", True),
    errors.MfaFailed: (401, "auth.mfa.failed", "invalid_request", True),
    errors.ReauthenticationRequired: (403, "auth.reauthentication.required", "invalid_request", True),
    errors.MfaEnrolmentRequired: (403, "auth.mfa.enrolment_required", "invalid_request", True),
    errors.TotpExists: (409, "account.totp.exists", "invalid_request", True),
    errors.TotpNotFound: (404, "account.totp.not_found", "invalid_request", True),
    errors.PasskeyNotFound: (404, "account.passkey.not_found", "invalid_request", True),
    errors.PasskeyRefused: (400, "account.passkey.invalid", "invalid_request", True),
    errors.SessionRequired: (401, "auth.session.required", "invalid_request", True),
    errors.UnmetAuthenticationRequirements: (400, "oauth2.authentication.unmet", "unmet_authentication_requirements",
                                             True),
}


def _error_classes(base: type[errors.LbauthError] = errors.LbauthError) -> set[type[errors.LbauthError]]:
    found = set()
    for cls in base.__subclasses__():
        found |= {cls} | _error_classes(cls)
    return found


def test_every_error_class_with_a_sub_code_is_in_the_table():
    with_sub_code = {cls for cls in _error_classes() if "sub_code" in vars(cls)}
    assert with_sub_code == set(EXPECTED)


@pytest.mark.parametrize("cls", EXPECTED, ids=lambda cls: cls.__name__)
def test_status_sub_code_rfc_error_and_redirectable(cls):
    error = cls()
    assert (error.status, error.sub_code, error.rfc_error, error.redirectable) == EXPECTED[cls]
    assert errors.by_sub_code(error.sub_code) is cls
    assert error.envelope() == {"code": error.status, "message": error.message, "subCode": error.sub_code}
    assert list(error.envelope()) == ["code", "message", "subCode"]
    assert error.message and str(error) == error.message
    assert error.headers == {}


def test_the_device_grants_access_denied_is_the_token_endpoints_400():
    """RFC 8628 3.5 answers as RFC 6749 5.2: 400, with the access-denied class's subCode."""
    error = errors.DeviceAccessDenied()
    assert isinstance(error, errors.AccessDenied)
    assert (error.status, error.sub_code, error.rfc_error) == (400, "oauth2.authorization.denied", "access_denied")
    assert errors.by_sub_code(error.sub_code) is errors.AccessDenied


def test_a_message_and_headers_may_be_given():
    error = errors.RateLimited("Slow down.", headers={"Retry-After": "3"})
    assert error.envelope() == {"code": 429, "message": "Slow down.", "subCode": "request.rate_limited"}
    assert error.headers == {"Retry-After": "3"}
    assert errors.RateLimited().message == "Too many requests; retry later."  # the class's text is untouched


def test_a_validation_failure_may_name_the_field_it_refuses():
    assert errors.ValidationFailed("name must be 1 to 200 characters").field is None
    error = errors.ValidationFailed("name must be 1 to 200 characters", field="name")
    assert error.field == "name"
    assert error.envelope() == {"code": 400, "message": "name must be 1 to 200 characters",
                                "subCode": "request.validation_failed"}  # the field is for pages, not the wire
    assert errors.MalformedRequest(431).field is None


def test_untrusted_client_errors_show_a_400_page_and_the_others_their_status():
    assert errors.ApplicationNotFound.page_status == errors.RedirectUriMismatch.page_status == 400
    assert errors.ScopeInvalid.page_status is None


def test_a_malformed_request_keeps_tornados_status():
    error = errors.MalformedRequest(431)
    assert error.envelope() == {"code": 431, "message": "The request is malformed.",
                                "subCode": "request.validation_failed"}
    assert errors.ValidationFailed.status == 400


def test_bearer_errors_carry_their_rfc_6750_challenge():
    assert errors.TokenMissing().challenge == "Bearer"
    assert errors.TokenExpired().challenge == 'Bearer error="invalid_token"'
    assert errors.ScopeInsufficient().challenge == 'Bearer error="insufficient_scope"'


def test_an_authorization_redirect_wraps_one_redirectable_error():
    redirect = errors.AuthorizationRedirect(errors.ScopeInvalid("Unknown scope: x"), "https://app.example/cb", "s1")
    assert redirect.params() == {"error": "invalid_scope", "error_description": "Unknown scope: x", "state": "s1"}
    assert errors.AuthorizationRedirect(errors.LoginRequired(), "https://app.example/cb", None).params() == {
        "error": "login_required", "error_description": "The user must sign in.", "state": None}
    with pytest.raises(AssertionError):
        errors.AuthorizationRedirect(errors.RedirectUriMismatch(), "https://evil.example/cb", None)
