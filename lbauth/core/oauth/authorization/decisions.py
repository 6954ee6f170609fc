"""What the authorization endpoint decides for a request (contract sections 5 and 15): go back to
the client with a code or an error, or show the user a page first. A bad client or redirect URI
is no decision: it stays a raised error, for the error page (RFC 6749 4.1.2.1)."""

from __future__ import annotations

from dataclasses import dataclass

from lbauth.core.oauth.authorization.request import AuthorizationRequest
from lbauth.errors import AuthorizationRedirect


@dataclass(frozen=True)
class CodeIssued:
    """Back to the client with a code (RFC 6749 4.1.2)."""
    request: AuthorizationRequest
    code: str

    @property
    def redirect_uri(self) -> str:
        return self.request.redirect_uri

    def params(self) -> dict[str, str | None]:
        return {"code": self.code, "state": self.request.state}


@dataclass(frozen=True)
class ErrorRedirect:
    """Back to the client with an error (RFC 6749 4.1.2.1): the redirect URI is known good."""
    refusal: AuthorizationRedirect

    @property
    def redirect_uri(self) -> str:
        return self.refusal.redirect_uri

    def params(self) -> dict[str, str | None]:
        return self.refusal.params()


@dataclass(frozen=True)
class SignIn:
    """The sign-in form, with `email` filled in; the request resumes from `resume` afterwards.
    `reason` names the check that asked for it (policy.py); `passkey_required`: only a passkey
    sign-in reaches what the request asks (`acr_values=phr`)."""
    request: AuthorizationRequest
    reason: str
    email: str
    resume: list[tuple[str, str]]
    passkey_required: bool = False


@dataclass(frozen=True)
class EnrolFactor:
    """LBAUTH_MFA=required and the user has no second factor: set one up first, then resume."""
    request: AuthorizationRequest
    reason: str
    resume: list[tuple[str, str]]


@dataclass(frozen=True)
class SelectAccount:
    """Continue as the signed-in account (to `resume`) or sign in as another."""
    request: AuthorizationRequest
    reason: str
    resume: list[tuple[str, str]]


@dataclass(frozen=True)
class Consent:
    """The consent page, whose Approve or Deny comes back as the request's answer."""
    request: AuthorizationRequest
    reason: str


ToClient = CodeIssued | ErrorRedirect
Decision = CodeIssued | ErrorRedirect | SignIn | EnrolFactor | SelectAccount | Consent
