"""When the authorization endpoint asks the user something (contract sections 5 and 15): the
prompts, in order, each with the checks that make it fire and say why.

A check that fires shows the prompt's page; under `prompt=none` (OpenID Connect Core 3.1.2.1) no
page may be shown and the check's error goes back to the client instead. The consent page's answer
(Approve or Deny) settles the consent prompt. When no check fires, the code is issued.

A new reason to ask (a second factor, an unmet `acr_values`) is one more `Check` in a prompt's
list, or one more `Interaction` with its page.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from lbauth.core import acr
from lbauth.core.accounts.sessions import SignedIn
from lbauth.core.oauth.authorization.decisions import (
    Consent,
    Decision,
    EnrolFactor,
    ErrorRedirect,
    SelectAccount,
    SignIn,
)
from lbauth.core.oauth.authorization.request import Answer, AuthorizationRequest
from lbauth.core.oidc.requests import Prompt
from lbauth.errors import (
    AuthorizationRedirect,
    ConsentRequired,
    InteractionRequired,
    LbauthError,
    LoginRequired,
    UnmetAuthenticationRequirements,
)
from lbauth.storage.db import Database
from lbauth.storage.repo import factors as factors_repo
from lbauth.storage.repo import grants as grants_repo


@dataclass
class Situation:
    """What the checks look at: the request, who is signed in, the user's answer and the time; the
    user's grant is read only by a check that needs it."""
    request: AuthorizationRequest
    signed_in: SignedIn | None
    answer: Answer | None
    now: float
    db: Database
    mfa_required: bool = False  # LBAUTH_MFA=required: a user without a second factor enrols one first
    _grant_covers: bool | None = field(default=None, repr=False)

    @property
    def prompts(self) -> frozenset[Prompt]:
        openid = self.request.openid
        return openid.prompt if openid is not None else frozenset()

    @property
    def silent(self) -> bool:
        """`prompt=none`: no page at all (contract 15)."""
        return Prompt.NONE in self.prompts

    async def grant_covers(self) -> bool:
        """The user's live grant already holds every requested scope and resource."""
        if self._grant_covers is None:
            assert self.signed_in is not None
            grant = await self.db.read(grants_repo.live_grant, self.signed_in.user.id, self.request.app.id)
            self._grant_covers = (grant is not None and set(self.request.scopes) <= set(grant.scopes)
                                  and set(self.request.resource_uris) <= set(grant.resources))
        return self._grant_covers


Fires = Callable[[Situation], Awaitable[bool]]


@dataclass(frozen=True)
class Check:
    """One reason for a prompt: `fires` says whether it holds; `error` is the answer under
    `prompt=none`. A `silent_only` check is made only under `prompt=none`."""
    reason: str
    fires: Fires
    error: Callable[[], LbauthError]
    silent_only: bool = False


@dataclass(frozen=True)
class Interaction:
    """A prompt, the checks that make it fire (in order), and the page it shows. `answered`: its
    page posts the user's Answer, which settles it (Approve) or refuses the request (Deny)."""
    prompt: Prompt
    checks: tuple[Check, ...]
    page: Callable[[Situation, str], Awaitable[Decision]]
    answered: bool = False

    async def firing(self, situation: Situation) -> Check | None:
        """The first check that fires, or None."""
        for check in self.checks:
            if check.silent_only and not situation.silent:
                continue
            if await check.fires(situation):
                return check
        return None


# ---- the checks ----------------------------------------------------------------------------------

def requested(prompt: Prompt) -> Fires:
    """The request's `prompt` holds this value."""
    async def fires(situation: Situation) -> bool:
        return prompt in situation.prompts
    return fires


async def no_session(situation: Situation) -> bool:
    return situation.signed_in is None


async def max_age_exceeded(situation: Situation) -> bool:
    """The last sign-in is older than `max_age` (OpenID Connect Core 3.1.2.1)."""
    openid, signed_in = situation.request.openid, situation.signed_in
    return (openid is not None and openid.max_age is not None and signed_in is not None
            and situation.now - signed_in.session.authenticated_at > openid.max_age)


async def acr_unmet(situation: Situation) -> bool:
    """The session's sign-in falls short of the first of the request's `acr_values` (contract 19)."""
    wanted, signed_in = situation.request.acr_values, situation.signed_in
    return (bool(wanted) and signed_in is not None
            and not acr.meets(acr.acr_of(signed_in.session.amr.split()), wanted[0]))


async def no_second_factor(situation: Situation) -> bool:
    """LBAUTH_MFA=required and the signed-in user has no second factor (contract 19)."""
    return situation.mfa_required and situation.signed_in is not None and not situation.signed_in.user.mfa


async def hint_names_another_user(situation: Situation) -> bool:
    """The id_token_hint's `sub` is not the signed-in user's subject for this app."""
    hinted, signed_in = situation.request.hinted_subject, situation.signed_in
    if hinted is None or signed_in is None:
        return False
    return hinted != await situation.db.read(grants_repo.subject, signed_in.user.id, situation.request.app.id)


async def unregistered_loopback(situation: Situation) -> bool:
    """A program on the device listening at an unregistered loopback URI is shown to the user every
    time: no code goes there without consent (contract 5)."""
    return situation.request.unregistered_loopback


async def grant_does_not_cover(situation: Situation) -> bool:
    return not await situation.grant_covers()


# ---- the pages -----------------------------------------------------------------------------------

async def sign_in(situation: Situation, reason: str) -> SignIn:
    """The sign-in form. A request's own sign-in resumes it without `prompt=login` and `max_age`;
    a consent answer posted after signing out resumes as the validated request."""
    request, signed_in = situation.request, situation.signed_in
    openid_hint = request.openid.login_hint if request.openid is not None else None
    email = openid_hint or (signed_in.user.email if signed_in is not None else "")
    resume = request.fields() if situation.answer is not None else resume_without(request.parameters, Prompt.LOGIN)
    return SignIn(request, reason, email or "", resume)


async def step_up(situation: Situation, reason: str) -> Decision:
    """`acr_values` asks for more than this sign-in proved: the user signs in again with what
    reaches it (a passkey for `phr`; the password and a second step for the multi-factor class),
    when they have it; otherwise the client hears `unmet_authentication_requirements`."""
    request, signed_in = situation.request, situation.signed_in
    assert signed_in is not None
    wanted = request.acr_values[0]
    if wanted == acr.PHISHING_RESISTANT:
        reachable = signed_in.user.mfa and bool(await situation.db.read(factors_repo.passkeys_of, signed_in.user.id))
    else:
        reachable = wanted == acr.PASSWORD_ONLY or signed_in.user.mfa
    if not reachable:
        return ErrorRedirect(AuthorizationRedirect(UnmetAuthenticationRequirements(), request.redirect_uri,
                                                   request.state))
    decision = await sign_in(situation, reason)
    return replace(decision, passkey_required=wanted == acr.PHISHING_RESISTANT)


async def enrol(situation: Situation, reason: str) -> EnrolFactor:
    """The security page first; the request resumes from there once a factor is set up."""
    return EnrolFactor(situation.request, reason, situation.request.fields() if situation.answer is not None
                       else [(name, value) for name, values in situation.request.parameters.items()
                             for value in values])


async def select_account(situation: Situation, reason: str) -> SelectAccount:
    return SelectAccount(situation.request, reason, resume_without(situation.request.parameters,
                                                                   Prompt.SELECT_ACCOUNT))


async def consent(situation: Situation, reason: str) -> Consent:
    return Consent(situation.request, reason)


def resume_without(params: Mapping[str, Sequence[str]], prompt: Prompt) -> list[tuple[str, str]]:
    """The request's parameters with one prompt value taken out (and `max_age`, for `login`: the
    sign-in made for this very request satisfies it, so max_age=0 signs in once, not forever)."""
    pairs = []
    for name, values in params.items():
        for value in values:
            if name == "prompt":
                value = " ".join(v for v in value.split() if v != prompt)
                if not value:
                    continue
            if name == "max_age" and prompt is Prompt.LOGIN:
                continue
            pairs.append((name, value))
    return pairs


def _hinted_user_differs() -> LbauthError:
    return LoginRequired("The signed-in user is not the one the id_token_hint names.")


POLICY: tuple[Interaction, ...] = (
    Interaction(Prompt.LOGIN, page=sign_in, checks=(
        Check("no_session", no_session, LoginRequired),
        Check("max_age", max_age_exceeded, LoginRequired),
        Check("prompt_login", requested(Prompt.LOGIN), LoginRequired),
        Check("id_token_hint", hint_names_another_user, _hinted_user_differs, silent_only=True),
    )),
    # No code for a user without a second factor when one is required (contract 19).
    Interaction(Prompt.LOGIN, page=enrol, checks=(
        Check("mfa_enrolment", no_second_factor, InteractionRequired),
    )),
    # A second sign-in for a stronger class (contract 19): under prompt=none, interaction_required.
    Interaction(Prompt.LOGIN, page=step_up, checks=(
        Check("acr_values", acr_unmet, InteractionRequired),
    )),
    Interaction(Prompt.SELECT_ACCOUNT, page=select_account, checks=(
        Check("prompt_select_account", requested(Prompt.SELECT_ACCOUNT), InteractionRequired),
    )),
    Interaction(Prompt.CONSENT, page=consent, answered=True, checks=(
        Check("prompt_consent", requested(Prompt.CONSENT), ConsentRequired),
        Check("unregistered_loopback", unregistered_loopback, ConsentRequired),
        Check("grant_does_not_cover", grant_does_not_cover, ConsentRequired),
    )),
)
