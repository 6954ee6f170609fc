"""The authorization request (RFC 6749 4.1.1, contract sections 5, 15 and 17), checked before
anything is asked of the user: its scopes, `state`, PKCE (RFC 7636) and `resource` values
(RFC 8707), from the front channel's query or form, or from the envelope API's JSON (spec 4.2).
Pure functions: the endpoint loads the client and the resources."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from lbauth.core import acr, resources, scopes, urls
from lbauth.core.fields import one
from lbauth.core.oidc.requests import OpenIdParameters
from lbauth.errors import ResponseTypeUnsupported, ScopeInvalid, ValidationFailed
from lbauth.storage.records import DPOP_ANY_KEY, App, Resource

_CHALLENGE = re.compile(r"[A-Za-z0-9\-._~]{43,128}")  # RFC 7636 4.2
MAX_STATE_LENGTH = 1024
RESPONSE_TYPE = "code"


class Answer(StrEnum):
    """The user's answer on the consent page (the form's `decision`)."""
    APPROVE = "approve"
    DENY = "deny"

_THUMBPRINT = re.compile(r"[A-Za-z0-9_-]{43}")  # 32 bytes of SHA-256, base64url


@dataclass(frozen=True)
class AuthorizationRequest:
    """A validated request: what the consent page shows and what the code will remember."""
    app: App
    redirect_uri: str
    scopes: tuple[str, ...]
    state: str | None
    code_challenge: str | None
    # RFC 8707 (contract 17): the `resource` values, normalised; once resolved, the registered
    # resources they name (whose URIs the code remembers).
    resource_indicators: tuple[str, ...] = ()
    resources: tuple[Resource, ...] = ()
    scope_sent: bool = True
    openid: OpenIdParameters | None = None  # an OpenID request's parameters (contract 15)
    hinted_subject: str | None = None  # the `sub` of a valid id_token_hint
    acr_values: tuple[str, ...] = ()  # the known `acr_values`, most preferred first (contract 19)
    request_uri: str | None = None  # a pushed request's reference (RFC 9126): its parameters are stored
    dpop_jkt: str | None = None  # RFC 9449 10: the key the code's exchange must prove
    # The front channel's parameters as sent (name -> all values): a sign-in or an account choice
    # resumes the request from them. Empty for the envelope API.
    parameters: Mapping[str, Sequence[str]] = field(default_factory=dict, repr=False)

    @property
    def bound_key(self) -> str | None:
        """The key the code is bound to (RFC 9449 10): `dpop_jkt`, or any key for an app whose
        tokens are all DPoP-bound (RFC 9449 5.2), or none."""
        return self.dpop_jkt or (DPOP_ANY_KEY if self.app.requires_dpop else None)

    @property
    def resource_uris(self) -> list[str]:
        return [r.uri for r in self.resources]

    @property
    def nonce(self) -> str | None:
        return self.openid.nonce if self.openid is not None else None

    @property
    def to_own_device(self) -> bool:
        """The redirect goes to a program on the user's own device (a loopback URI)."""
        return urls.goes_to_this_device(self.redirect_uri)

    @property
    def unregistered_loopback(self) -> bool:
        """Admitted by the localhost rule alone: always shown the consent page (contract 5), since
        anything on the device may listen there."""
        return not urls.is_registered(self.redirect_uri, list(self.app.redirect_uris))

    def fields(self) -> list[tuple[str, str]]:
        """The request as validated, as form fields: what the consent form posts back (without the
        nonce, which the page adds)."""
        fields = [("client_id", self.app.client_id), ("redirect_uri", self.redirect_uri),
                  ("response_type", RESPONSE_TYPE), ("scope", " ".join(self.scopes))]
        if self.state is not None:  # a request without state comes back without one (contract 5)
            fields.append(("state", self.state))
        if self.code_challenge:
            fields += [("code_challenge", self.code_challenge), ("code_challenge_method", "S256")]
        fields += [("resource", resource.uri) for resource in self.resources]
        if self.acr_values:
            fields.append(("acr_values", " ".join(self.acr_values)))
        if self.dpop_jkt:
            fields.append(("dpop_jkt", self.dpop_jkt))
        return fields

    def posted_back(self) -> list[tuple[str, str]]:
        """What the consent form posts back: a pushed request's reference (its parameters stay
        stored: RFC 9126 4), or the request's `fields`."""
        if self.request_uri is not None:
            return [("client_id", self.app.client_id), ("request_uri", self.request_uri)]
        return self.fields()


def front_channel_state(params: Mapping[str, Sequence[str]]) -> str | None:
    """The `state` an error redirect carries: the one sent, once and not empty (RFC 6749 3.1)."""
    states = params.get("state", [])
    return states[0] if len(states) == 1 and states[0] else None


def front_channel(app: App, params: Mapping[str, Sequence[str]]) -> AuthorizationRequest:
    """GET or POST {auth_url}/oauth/: every parameter once (`resource` may repeat, RFC 8707 2);
    response_type, state, scope, PKCE. `params` maps each name to all the values sent."""
    repeated = sorted(name for name, values in params.items() if len(values) > 1 and name != "resource")
    if repeated:
        raise ValidationFailed(f"Parameter sent more than once: {repeated[0][:40]}")
    response_type = one(params, "response_type")
    if not response_type:
        raise ValidationFailed("response_type is required")
    if response_type != RESPONSE_TYPE:
        raise ResponseTypeUnsupported()
    state = front_channel_state(params)
    if not state and not one(params, "code_challenge"):
        # Contract 5: with a PKCE challenge, state may be left out (OAuth 2.1 4.1.1); PKCE is then
        # the client's CSRF protection.
        raise ValidationFailed("state is required (or a PKCE code_challenge)")
    if state and len(state) > MAX_STATE_LENGTH:
        raise ValidationFailed(f"state must be at most {MAX_STATE_LENGTH} characters")
    scope = one(params, "scope")
    requested = requested_scopes(app, scope)
    challenge = _check_pkce(one(params, "code_challenge"), one(params, "code_challenge_method"), app)
    return AuthorizationRequest(app, params["redirect_uri"][0], requested, state, challenge,
                                resource_indicators=resources.parse(params.get("resource", ())),
                                scope_sent=scope is not None, parameters=params,
                                acr_values=acr.requested(one(params, "acr_values")),
                                dpop_jkt=_check_dpop_jkt(one(params, "dpop_jkt")))


def _check_dpop_jkt(value: str | None) -> str | None:
    """RFC 9449 10: the JWK SHA-256 thumbprint (RFC 7638) of the key the client will prove, base64url."""
    if not value:
        return None
    if not _THUMBPRINT.fullmatch(value):
        raise ValidationFailed("dpop_jkt must be a JWK SHA-256 thumbprint (RFC 7638), base64url without padding")
    return value


def check_api_request(app: App, redirect_uri: str, scope: Any, state: Any, challenge: Any,
                      method: Any, resource: Any = None) -> AuthorizationRequest:
    """POST /api/oauth/authorize/external (spec 4.2): errors are envelopes. `scope` is a JSON array
    of strings, as spec 4.2 types it: a bare string is refused, not split (contract 5); `resource`
    (RFC 8707, contract 17), when sent, an array of strings too."""
    if resource is not None and (not isinstance(resource, list) or not all(isinstance(r, str) for r in resource)):
        raise ValidationFailed("resource must be an array of strings")
    if not isinstance(scope, list) or not all(isinstance(s, str) for s in scope):
        raise ValidationFailed("scope must be an array of strings")
    requested = scopes.requested(scope)
    if not requested:
        raise ScopeInvalid("At least one scope is required.")
    _check_allowed(app, requested)
    if state is not None and (not isinstance(state, str) or len(state) > MAX_STATE_LENGTH):
        raise ValidationFailed(f"state must be a string of at most {MAX_STATE_LENGTH} characters")
    for value in (challenge, method):
        if value is not None and not isinstance(value, str):
            raise ValidationFailed("codeChallenge and codeChallengeMethod must be strings")
    return AuthorizationRequest(app, redirect_uri, requested, state, _check_pkce(challenge, method, app),
                                resource_indicators=resources.parse(resource or ()))


def requested_scopes(app: App, scope: str | None) -> tuple[str, ...]:
    """RFC 6749 3.3: the scopes a request's `scope` asks for, all of them the app's (ScopeInvalid
    otherwise); without one, the app's default scopes."""
    requested = scopes.parse_space_separated(scope) if scope is not None else tuple(app.default_scopes)
    _check_allowed(app, requested)
    return requested


def _check_allowed(app: App, requested: tuple[str, ...]) -> None:
    if not requested:
        raise ScopeInvalid("At least one scope is required.")
    refused = [s for s in requested if s not in app.scopes]
    if refused:
        raise ScopeInvalid(f"This app may not request the scope {refused[0]}.")


def _check_pkce(challenge: str | None, method: str | None, app: App) -> str | None:
    """RFC 7636 4.3, S256 only: `plain` would send the verifier's equivalent in the clear. Required
    of a public client (contract 17; OAuth 2.1 7.5.1): its code is all that a thief would need."""
    if challenge is None and method is None:
        if app.public:
            raise ValidationFailed("A public client must send a PKCE code_challenge (code_challenge_method S256).")
        return None
    if not challenge:
        raise ValidationFailed("code_challenge_method was sent without code_challenge")
    if method != "S256":
        raise ValidationFailed("code_challenge_method must be S256")
    if not _CHALLENGE.fullmatch(challenge):
        raise ValidationFailed("code_challenge must be 43 to 128 characters of [A-Za-z0-9-._~]")
    return challenge
