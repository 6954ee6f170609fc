"""The authorization endpoint (lbauth/core/oauth/authorization): what it decides for a request and
who is signed in, as a table, and its interaction policy as data (contract sections 5 and 15), on a
temporary SQLite file with the frozen clock; no HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lbauth import errors
from lbauth.clock import FrozenClock
from lbauth.core.accounts import users
from lbauth.core.accounts.sessions import BROWSER, SignedIn
from lbauth.core.oauth.authorization.decisions import (
    CodeIssued,
    Consent,
    Decision,
    ErrorRedirect,
    SelectAccount,
    SignIn,
)
from lbauth.core.oauth.authorization.endpoint import AuthorizationEndpoint
from lbauth.core.oauth.authorization.policy import POLICY, resume_without
from lbauth.core.oauth.authorization.request import Answer
from lbauth.core.oidc.requests import Prompt
from lbauth.server import build_services
from lbauth.services import Services
from tests.conftest import START_TIME, make_settings

REDIRECT_URI = "https://app.example/callback"
PASSWORD = "plover kettle 12"


@pytest.fixture
def backend() -> str:
    return "sqlite"  # the HTTP tests cover PostgreSQL; these stay fast


@pytest.fixture
async def services(tmp_path: Path, database_url: str) -> AsyncIterator[Services]:
    built = await build_services(make_settings(tmp_path, database_url), FrozenClock(START_TIME), announce=False)
    try:
        yield built
    finally:
        await built.db.close()


@dataclass
class World:
    services: Services
    client_id: str
    signed_in: SignedIn

    @property
    def endpoint(self) -> AuthorizationEndpoint:
        return self.services.oauth.authorization_endpoint

    def params(self, **extra: str) -> dict[str, list[str]]:
        sent = {"client_id": self.client_id, "redirect_uri": REDIRECT_URI, "response_type": "code",
                "state": "s1", "scope": "openid userinfo", **extra}
        return {name: [value] for name, value in sent.items()}

    async def decide(self, signed_in: bool = True, answer: Answer | None = None, **extra: str) -> Decision:
        return await self.endpoint.front_channel(self.params(**extra), self.signed_in if signed_in else None, answer)


@pytest.fixture
async def world(services: Services) -> World:
    email = "ada@example.com"
    await users.create_user(services.db, services.clock, email=email, name="Ada", password=PASSWORD)
    app = await services.apps.create(name="Notes", owner_email=email, redirect_uris=[REDIRECT_URI])
    session = await services.accounts.sign_in(email, PASSWORD, kind=BROWSER)
    return World(services, app.client_id, await services.accounts.sessions.check(session.token, kind=BROWSER))


def summary(decision: Decision) -> tuple[str, str | None]:
    """The decision's kind, and why: the check's reason for a page, the error for a redirect."""
    match decision:
        case ErrorRedirect():
            return "redirect", decision.params()["error"]
        case CodeIssued():
            return "code", None
        case SignIn() | SelectAccount() | Consent():
            return type(decision).__name__, decision.reason
    raise AssertionError(decision)


# ---- the policy as data ---------------------------------------------------------------------------

def test_the_policy_is_login_then_select_account_then_consent_each_with_its_reasons():
    assert [(i.prompt, [c.reason for c in i.checks]) for i in POLICY] == [
        (Prompt.LOGIN, ["no_session", "max_age", "prompt_login", "id_token_hint"]),
        (Prompt.LOGIN, ["mfa_enrolment"]),  # LBAUTH_MFA=required: the security page first
        (Prompt.LOGIN, ["acr_values"]),  # a sign-in again, for a stronger class (or unmet)
        (Prompt.SELECT_ACCOUNT, ["prompt_select_account"]),
        (Prompt.CONSENT, ["prompt_consent", "unregistered_loopback", "grant_does_not_cover"]),
    ]
    assert [i.prompt for i in POLICY if i.answered] == [Prompt.CONSENT]  # the consent page posts Approve/Deny
    assert [c.reason for i in POLICY for c in i.checks if c.silent_only] == ["id_token_hint"]


def test_a_resumed_request_leaves_out_the_prompt_it_satisfied():
    params = {"prompt": ["login select_account"], "max_age": ["0"], "state": ["s"]}
    assert resume_without(params, Prompt.LOGIN) == [("prompt", "select_account"), ("state", "s")]
    assert resume_without(params, Prompt.SELECT_ACCOUNT) == [("prompt", "login"), ("max_age", "0"), ("state", "s")]


# ---- (request, session, grant) -> decision ------------------------------------------------------------

@pytest.mark.parametrize(("extra", "signed_in", "granted", "expected"), [
    ({}, False, False, ("SignIn", "no_session")),
    ({}, True, False, ("Consent", "grant_does_not_cover")),
    ({}, True, True, ("code", None)),
    ({"prompt": "consent"}, True, True, ("Consent", "prompt_consent")),
    ({"prompt": "login"}, True, True, ("SignIn", "prompt_login")),
    ({"prompt": "login consent"}, True, True, ("SignIn", "prompt_login")),
    ({"prompt": "select_account"}, True, True, ("SelectAccount", "prompt_select_account")),
    ({"prompt": "select_account"}, False, True, ("SignIn", "no_session")),
    ({"max_age": "3600"}, True, True, ("code", None)),
    ({"max_age": "0"}, True, True, ("SignIn", "max_age")),
    ({"prompt": "none"}, False, True, ("redirect", "login_required")),
    ({"prompt": "none", "max_age": "0"}, True, True, ("redirect", "login_required")),
    ({"prompt": "none"}, True, False, ("redirect", "consent_required")),
    ({"prompt": "none"}, True, True, ("code", None)),
    ({"prompt": "none login"}, True, True, ("redirect", "invalid_request")),
    ({"scope": "userinfo", "prompt": "login"}, True, True, ("code", None)),  # prompt is OpenID's only
    ({"scope": "chat.nonexistent"}, True, True, ("redirect", "invalid_scope")),
    ({"response_type": "token"}, True, True, ("redirect", "unsupported_response_type")),
    ({"request_uri": "urn:x"}, True, True, ("redirect", "request_uri_not_supported")),
    ({"id_token_hint": "not-a-jwt"}, True, True, ("redirect", "invalid_request")),
])
async def test_the_decision_for_a_request(world, extra, signed_in, granted, expected):
    world.services.clock.advance(10)  # the session signed in 10 s ago
    if granted:
        await world.endpoint.front_channel(world.params(), world.signed_in, Answer.APPROVE)
    assert summary(await world.decide(signed_in, **extra)) == expected


@pytest.mark.parametrize(("answer", "signed_in", "expected"), [
    (Answer.APPROVE, True, ("code", None)),
    (Answer.DENY, True, ("redirect", "access_denied")),
    (Answer.APPROVE, False, ("SignIn", "no_session")),  # a consent form posted after signing out
    (Answer.DENY, False, ("SignIn", "no_session")),
])
async def test_the_decision_for_the_consent_pages_answer(world, answer, signed_in, expected):
    assert summary(await world.decide(signed_in, answer)) == expected


async def test_an_error_redirect_carries_the_state_as_sent(world):
    decision = await world.decide(scope="nonexistent")
    assert isinstance(decision, ErrorRedirect) and decision.redirect_uri == REDIRECT_URI
    assert decision.params() == {"error": "invalid_scope", "state": "s1",
                                 "error_description": "Unknown scope: nonexistent"}


async def test_a_code_goes_back_with_the_state(world):
    decision = await world.decide(answer=Answer.APPROVE)
    assert isinstance(decision, CodeIssued) and decision.redirect_uri == REDIRECT_URI
    assert decision.params() == {"code": decision.code, "state": "s1"} and decision.code.startswith("lba_ac_")


async def test_a_sign_in_resumes_the_request_and_fills_in_the_hint(world):
    decision = await world.decide(signed_in=False, prompt="login", max_age="0", login_hint="ada@example.com")
    assert isinstance(decision, SignIn) and decision.email == "ada@example.com"
    assert ("prompt", "login") not in decision.resume and "max_age" not in dict(decision.resume)
    assert dict(decision.resume)["login_hint"] == "ada@example.com"
    again = await world.decide(signed_in=True, prompt="login")
    assert isinstance(again, SignIn) and again.email == "ada@example.com"  # the signed-in user's


async def test_a_consent_answer_after_signing_out_resumes_as_the_validated_request(world):
    decision = await world.decide(signed_in=False, answer=Answer.APPROVE, nonce="n1")
    assert isinstance(decision, SignIn)
    assert decision.resume == decision.request.fields()
    assert dict(decision.resume)["scope"] == "openid userinfo"


async def test_a_bad_client_or_redirect_uri_is_raised_never_decided(world):
    with pytest.raises(errors.ApplicationNotFound):
        await world.endpoint.front_channel({**world.params(), "client_id": ["cid_unknown"]}, world.signed_in)
    with pytest.raises(errors.RedirectUriMismatch):
        await world.endpoint.front_channel({**world.params(), "redirect_uri": ["https://evil.example/"]}, None)
    with pytest.raises(errors.ValidationFailed, match="client_id must be sent exactly once"):
        await world.endpoint.front_channel({**world.params(), "client_id": [world.client_id] * 2}, None)


async def test_the_api_request_is_the_users_approval(world):
    endpoint = world.endpoint
    request = await endpoint.api_request(world.client_id, REDIRECT_URI, ["openid", "userinfo"], nonce="n1")
    assert request.openid is not None and request.nonce == "n1" and request.openid.prompt == frozenset()
    issued = await endpoint.approve(request, world.signed_in)
    assert issued.request is request and issued.code.startswith("lba_ac_")
    plain = await endpoint.api_request(world.client_id, REDIRECT_URI, ["userinfo"], nonce="n1")
    assert plain.openid is None  # the nonce is checked, and only an OpenID request keeps it
    with pytest.raises(errors.ValidationFailed, match="nonce must be a string"):
        await endpoint.api_request(world.client_id, REDIRECT_URI, ["userinfo"], nonce=7)
    with pytest.raises(errors.ScopeInvalid):
        await endpoint.api_request(world.client_id, REDIRECT_URI, ["nonexistent"])


async def test_client_of_names_only_a_known_client_and_its_uri(world):
    endpoint = world.endpoint
    found = await endpoint.client_of(f"/oauth/?client_id={world.client_id}&redirect_uri={REDIRECT_URI}")
    assert found is not None
    app, redirect_uri = found
    assert (app.client_id, app.name, redirect_uri) == (world.client_id, "Notes", REDIRECT_URI)
    for target in ("/account/apps", f"/oauth/?client_id=cid_unknown&redirect_uri={REDIRECT_URI}",
                   f"/oauth/?client_id={world.client_id}&redirect_uri=https://evil.example/"):
        assert await endpoint.client_of(target) is None
