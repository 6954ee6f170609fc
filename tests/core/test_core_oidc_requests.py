"""The OpenID parameters of an authorization request (lbauth/core/oidc/requests.py; OpenID Connect
Core 3.1.2.1, contract 15), parsed without a server: what each parameter becomes, which values are
refused and with which error, and what the code remembers for its ID token."""

from __future__ import annotations

import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lbauth import errors
from lbauth.core.oidc.requests import MAX_NONCE_LENGTH, PROMPTS, OpenIdParameters, id_token_details, parse
from lbauth.storage.records import App, OpenIdDetails, Session

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def parsed(**params: str) -> OpenIdParameters:
    """What a request sending each of `params` once gives."""
    return parse({name: [value] for name, value in params.items()})


def test_a_request_without_openid_parameters_asks_for_nothing():
    assert parse({}) == OpenIdParameters(nonce=None, prompt=frozenset(), max_age=None, login_hint=None,
                                         id_token_hint=None)


def test_every_parameter_is_read():
    assert parsed(nonce="n-0S6_WzA2Mj", prompt="login consent", max_age="300", login_hint="ada@example.com",
                  id_token_hint="eyJ.hint.sig") == OpenIdParameters(
        nonce="n-0S6_WzA2Mj", prompt=frozenset({"login", "consent"}), max_age=300, login_hint="ada@example.com",
        id_token_hint="eyJ.hint.sig")


def test_parameters_sent_without_a_value_are_omitted():
    """RFC 6749 3.1: a parameter sent without a value is treated as if it were omitted."""
    assert parsed(nonce="", prompt="", max_age="", login_hint="", id_token_hint="") == parse({})


def test_the_ignored_parameters_change_nothing():
    """display, ui_locales, claims_locales and acr_values are accepted and ignored (contract 15)."""
    assert parsed(display="popup", ui_locales="fr-CA en", claims_locales="de",
                  acr_values="urn:mace:incommon:iap:silver", nonce="n") == parsed(nonce="n")


def test_the_nonce_is_kept_up_to_its_limit():
    longest = "n" * MAX_NONCE_LENGTH
    assert parsed(nonce=longest).nonce == longest
    too_long = f"nonce must be a string of at most {MAX_NONCE_LENGTH} characters"
    with pytest.raises(errors.ValidationFailed, match=too_long):
        parsed(nonce=longest + "n")


def test_the_login_hint_is_cut_to_the_longest_email():
    assert parsed(login_hint="a" * 400).login_hint == "a" * 320


@pytest.mark.parametrize(("value", "prompt"), [
    ("none", {"none"}),
    ("login", {"login"}),
    ("consent", {"consent"}),
    ("select_account", {"select_account"}),
    ("consent login select_account", {"login", "consent", "select_account"}),
    ("  login\tconsent  ", {"login", "consent"}),
    ("login login", {"login"}),
    ("none none", {"none"}),
])
def test_prompt_is_a_set_of_known_values(value, prompt):
    assert parsed(prompt=value).prompt == frozenset(prompt)


@pytest.mark.parametrize("value", ["none login", "consent none", "none select_account"])
def test_prompt_none_with_another_value_is_invalid_request(value):
    with pytest.raises(errors.ValidationFailed, match="prompt=none cannot be combined"):
        parsed(prompt=value)


@pytest.mark.parametrize("value", ["create", "Login", "NONE", "login,consent", "login unknown"])
def test_an_unknown_prompt_value_is_invalid_request(value):
    with pytest.raises(errors.ValidationFailed, match="prompt must be among: consent, login, none, select_account"):
        parsed(prompt=value)


@FAST
@given(st.lists(st.sampled_from(sorted(PROMPTS) + ["create", "Login", "x"]), max_size=6),
       st.sampled_from([" ", "  ", "\t", " \n "]))
def test_prompt_is_accepted_exactly_when_known_and_none_stands_alone(values, separator):
    wanted = frozenset(values)
    if not wanted <= PROMPTS or ("none" in wanted and len(wanted) > 1):
        with pytest.raises(errors.ValidationFailed):
            parsed(prompt=separator.join(values))
    else:
        assert parsed(prompt=separator.join(values)).prompt == wanted


@pytest.mark.parametrize(("value", "max_age"), [("0", 0), ("1", 1), ("3600", 3600), ("0000000007", 7),
                                                ("9999999999", 9_999_999_999)])
def test_max_age_is_a_whole_number_of_seconds_of_up_to_ten_digits(value, max_age):
    assert parsed(max_age=value).max_age == max_age


@pytest.mark.parametrize("value", ["-1", "+1", "1.5", "1e3", " 1", "1 ", "0x10", "ten", "10000000000",
                                   "00000000001", "\u00b2", "\u0661\u0662", "\uff11"])
def test_any_other_max_age_is_invalid_request(value):
    """Eleven digits, signs, spaces, and digits outside ASCII (a superscript two, Arabic-Indic and
    full-width digits) are all refused the same way."""
    with pytest.raises(errors.ValidationFailed, match="max_age must be a whole number of seconds"):
        parsed(max_age=value)


@FAST
@given(st.one_of(st.text(max_size=12), st.text(alphabet=string.digits, min_size=1, max_size=12),
                 st.text(alphabet=st.characters(categories=("Nd", "No")), min_size=1, max_size=4)))
def test_max_age_is_read_as_ascii_digits_or_refused_as_invalid_request(value):
    """Whatever a client sends, the answer is a number or invalid_request, never another error."""
    try:
        max_age = parsed(max_age=value).max_age
    except errors.ValidationFailed:
        assert value and not (value.isascii() and value.isdigit() and len(value) <= 10)
    else:
        assert max_age == (int(value) if value else None)
        assert not value or (value.isascii() and value.isdigit() and len(value) <= 10)


@pytest.mark.parametrize(("name", "error"), [("request", errors.RequestNotSupported),
                                             ("request_uri", errors.RequestUriNotSupported)])
def test_request_objects_are_refused(name, error):
    """OpenID Connect Core 6; RFC 9101: request_not_supported and request_uri_not_supported."""
    value = "eyJhbGciOiJub25lIn0.eyJzY29wZSI6Im9wZW5pZCJ9." if name == "request" else "https://rp.example/r.jwt"
    with pytest.raises(error) as refused:
        parsed(**{name: value, "nonce": "n"})
    assert refused.value.rfc_error == f"{name}_not_supported" and refused.value.redirectable


def test_a_request_object_is_refused_before_anything_else_is_read():
    with pytest.raises(errors.RequestNotSupported):
        parsed(request="x", request_uri="https://rp.example/r.jwt", prompt="bogus", max_age="-1")


def test_the_code_remembers_the_apps_algorithm_the_sign_in_and_the_nonce():
    app = App(id="app_1", client_id="cid_1", name="Notes", owner_id="usr_1", client_secret_hash="s" * 64,
              redirect_uris=["https://app.example/cb"], scopes=["openid"], webhook_url=None,
              webhook_secret_sealed="", webhook_disabled_at=None, created_at=1, updated_at=1, id_token_alg="EdDSA",
              post_logout_redirect_uris=[], token_endpoint_auth_method="client_secret_basic", registration="operator",
              registration_token_hash=None, client_metadata=None, document_expires_at=None, owner_email=None)
    session = Session(id="ses_1", token_hash="u" * 64, user_id="usr_1", kind="browser", created_at=1_899_990_000,
                      last_used_at=1_899_999_500, expires_at=1_900_090_000, ended_at=None, user_agent="",
                      ip_address="::1", authenticated_at=1_899_999_000)
    assert id_token_details(app, session, "n-1") == OpenIdDetails(id_token_alg="EdDSA", nonce="n-1",
                                                                  session_id=session.id)
    assert id_token_details(app, session, None).nonce is None
