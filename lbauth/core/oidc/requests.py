"""The OpenID parameters of an authorization request (OpenID Connect Core 3.1.2.1; contract 15):
nonce, prompt, max_age, login_hint, id_token_hint; the ignored and the refused ones."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from lbauth import errors
from lbauth.core.fields import one
from lbauth.storage.records import App, OpenIdDetails, Session

MAX_NONCE_LENGTH = 512


class Prompt(StrEnum):
    """The values of `prompt` (OpenID Connect Core 3.1.2.1)."""
    NONE = "none"
    LOGIN = "login"
    CONSENT = "consent"
    SELECT_ACCOUNT = "select_account"


PROMPTS = frozenset(Prompt)
# Accepted and ignored (contract 15); `request` and `request_uri` are refused (RFC 9101).
# `acr_values` is read for every request, OpenID or not (core/oauth/authorization/request.py).
IGNORED = ("display", "ui_locales", "claims_locales")
PARAMETERS = ("nonce", "prompt", "max_age", "login_hint", "id_token_hint", "acr_values", *IGNORED)


@dataclass(frozen=True)
class OpenIdParameters:
    nonce: str | None
    prompt: frozenset[Prompt] = frozenset()
    max_age: int | None = None
    login_hint: str | None = None
    id_token_hint: str | None = None


def parse(params: Mapping[str, Sequence[str]]) -> OpenIdParameters:
    """The OpenID parameters of a request whose scope holds `openid` (each at most once: the
    caller has refused repeats); errors are redirectable (`invalid_request` and the two above)."""
    if one(params, "request"):  # RFC 6749 3.1: a parameter sent empty counts as omitted
        raise errors.RequestNotSupported()
    if one(params, "request_uri"):
        raise errors.RequestUriNotSupported()
    nonce = checked_nonce(one(params, "nonce") or None)
    values = frozenset((one(params, "prompt") or "").split())
    if not values <= PROMPTS:
        raise errors.ValidationFailed(f"prompt must be among: {', '.join(sorted(PROMPTS))}")
    prompt = frozenset(Prompt(value) for value in values)
    if Prompt.NONE in prompt and len(prompt) > 1:
        raise errors.ValidationFailed("prompt=none cannot be combined with another prompt value")
    raw_max_age = one(params, "max_age")
    max_age = None
    if raw_max_age not in (None, ""):
        # ASCII digits only: str.isdigit also admits "²", which int() refuses (an uncaught 500)
        if not (raw_max_age.isascii() and raw_max_age.isdigit()) or len(raw_max_age) > 10:
            raise errors.ValidationFailed("max_age must be a whole number of seconds")
        max_age = int(raw_max_age)
    login_hint = (one(params, "login_hint") or "")[:320] or None
    return OpenIdParameters(nonce, prompt, max_age, login_hint, one(params, "id_token_hint") or None)


def checked_nonce(nonce: object) -> str | None:
    """`nonce` as sent (a string, or None when absent), or invalid_request (contract 15)."""
    if nonce is not None and (not isinstance(nonce, str) or len(nonce) > MAX_NONCE_LENGTH):
        raise errors.ValidationFailed(f"nonce must be a string of at most {MAX_NONCE_LENGTH} characters")
    return nonce


def id_token_details(app: App, session: Session, nonce: str | None) -> OpenIdDetails:
    """What the code remembers for its ID token: the app's algorithm at this moment, the session
    that approved (`sid`), and the nonce."""
    return OpenIdDetails(id_token_alg=app.id_token_alg, nonce=nonce, session_id=session.id)
