"""Codes (spec section 2, contract 5): issued under the live grant, redeemed at most once, and the
redemption stores the refresh token it issues."""

from __future__ import annotations

import itertools

import pytest
from sqlalchemy import update

from lbauth.storage import Connection, Duplicate
from lbauth.storage.db import Database
from lbauth.storage.models import authorization_codes as codes_model
from lbauth.storage.records import (
    Authentication,
    ClaimedCode,
    Code,
    CodeGrant,
    CodeRule,
    CodeState,
    ProvenKey,
    RefreshToken,
)
from lbauth.storage.repo import codes as codes_repo
from lbauth.storage.repo import tokens as tokens_repo
from tests.storage.conftest import NOW, Granted, add_app

CHALLENGE = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"


# A sign-in with a second step 30 s before the code: the code, its claim and its refresh token keep it.
SIGNED_IN = Authentication(auth_time=NOW - 30, amr="pwd otp mfa")


async def _issue(db: Database, granted: Granted, code_hash: str = "c" * 64, challenge: str | None = None,
                 expires_at: int = NOW + 300) -> None:
    await db.transaction(codes_repo.insert_code, code_hash=code_hash, app_id=granted.app.id,
                         user_id=granted.user.id, grant_id=granted.grant_id, asu=granted.asu,
                         redirect_uri="https://app.example/cb", scopes=["userinfo"], code_challenge=challenge,
                         now=NOW, expires_at=expires_at, authentication=SIGNED_IN)


def _redeem_args(**overrides: object) -> dict[str, object]:
    return {"code_hash": "c" * 64, "client_id": "cid_1", "client_secret_hash": "s" * 64,
            "redirect_uri": "https://app.example/cb", "challenge": None, "now": NOW + 10, "access_jti": "jti-1",
            "refresh_hash": "r" * 64, "refresh_expires_at": NOW + 86400, **overrides}


async def test_a_code_is_redeemed_exactly_once(db: Database, granted: Granted) -> None:
    await _issue(db, granted)

    first = await db.transaction(codes_repo.redeem, **_redeem_args())
    again = await db.transaction(codes_repo.redeem, **_redeem_args(access_jti="jti-2", refresh_hash="q" * 64))

    assert first == ClaimedCode(app_id=granted.app.id, user_id=granted.user.id, grant_id=granted.grant_id,
                                asu=granted.asu, scopes=["userinfo"], id_token_alg=None, nonce=None,
                                auth_time=NOW - 30, session_id=None, resources=[], amr="pwd otp mfa")
    assert again is None
    code = await db.read(codes_repo.by_hash, "c" * 64)
    assert isinstance(code, Code)
    assert (code.used_at, code.access_jti) == (NOW + 10, "jti-1")
    stored = await db.read(tokens_repo.by_hash, "r" * 64)
    assert stored == RefreshToken(token_hash="r" * 64, app_id=granted.app.id, user_id=granted.user.id,
                                  grant_id=granted.grant_id, code_hash="c" * 64, asu=granted.asu,
                                  scopes=["userinfo"], created_at=NOW + 10, expires_at=NOW + 86400, revoked_at=None,
                                  auth_time=NOW - 30, session_id=None, resources=[], rotated_at=None,
                                  amr="pwd otp mfa", dpop_jkt=None)
    assert await db.read(tokens_repo.by_hash, "q" * 64) is None


async def test_a_failed_check_claims_nothing(db: Database, granted: Granted) -> None:
    await _issue(db, granted, challenge=CHALLENGE)
    refused = [_redeem_args(client_secret_hash="x" * 64, challenge=CHALLENGE),
               _redeem_args(client_id="cid_other", challenge=CHALLENGE),
               _redeem_args(redirect_uri="https://app.example/other", challenge=CHALLENGE),
               _redeem_args(challenge=None),
               _redeem_args(challenge="A" * 43),
               _redeem_args(challenge=CHALLENGE, now=NOW + 300)]  # expired: expires_at is not after now
    for args in refused:
        assert await db.transaction(codes_repo.redeem, **args) is None, args

    code = await db.read(codes_repo.by_hash, "c" * 64)
    assert code is not None and code.used_at is None and code.access_jti is None
    assert await db.read(tokens_repo.by_hash, "r" * 64) is None
    assert await db.transaction(codes_repo.redeem, **_redeem_args(challenge=CHALLENGE)) is not None


async def test_a_dpop_proof_is_spent_by_the_redemption_and_a_spent_one_claims_nothing(
        db: Database, granted: Granted) -> None:
    """RFC 9449 11.1: the proof's single use is recorded with the claim (one statement on
    PostgreSQL); a proof recorded before raises Duplicate and leaves the code unclaimed, whatever
    else the redemption has right."""
    await _issue(db, granted)
    await _issue(db, granted, code_hash="d" * 64)
    proof = ProvenKey("jkt-1", "p" * 64, NOW + 120)

    refused = await db.transaction(codes_repo.redeem, **_redeem_args(client_secret_hash="x" * 64), proof=proof)
    assert refused is None  # a wrong secret claims nothing, and the proof is spent all the same
    with pytest.raises(Duplicate):
        await db.transaction(codes_repo.redeem, **_redeem_args(), proof=proof)
    code = await db.read(codes_repo.by_hash, "c" * 64)
    assert code is not None and code.used_at is None
    assert await db.read(tokens_repo.by_hash, "r" * 64) is None

    claimed = await db.transaction(codes_repo.redeem, **_redeem_args(code_hash="d" * 64, dpop_jkt="jkt-2"),
                                   proof=ProvenKey("jkt-2", "q" * 64, NOW + 120))
    assert claimed is not None and claimed.user_id == granted.user.id
    assert await db.read(tokens_repo.by_hash, "r" * 64) is not None


async def test_a_revoked_code_cannot_be_redeemed(db: Database, granted: Granted) -> None:
    await _issue(db, granted)
    await db.transaction(codes_repo.revoke_for_grant, granted.grant_id, NOW + 1)

    assert await db.transaction(codes_repo.redeem, **_redeem_args()) is None
    code = await db.read(codes_repo.by_hash, "c" * 64)
    assert code is not None and code.revoked_at == NOW + 1


async def test_a_code_under_the_live_grant_in_one_statement(db: Database, granted: Granted) -> None:
    def issue(conn: Connection, user_id: str) -> CodeGrant | None:
        return codes_repo.insert_from_live_grant(conn, user_id=user_id, app_id=granted.app.id, code_hash="d" * 64,
                                                 redirect_uri="https://app.example/cb", scopes=["profile"],
                                                 challenge=CHALLENGE, now=NOW, expires_at=NOW + 300,
                                                 authentication=SIGNED_IN)

    assert await db.transaction(issue, "usr_nobody") is None
    assert await db.transaction(issue, granted.user.id) == CodeGrant(grant_id=granted.grant_id,
                                                                      grant_scopes=["userinfo"], grant_resources=None)
    code = await db.read(codes_repo.by_hash, "d" * 64)
    assert code is not None
    assert (code.grant_id, code.asu, code.scopes, code.code_challenge) == (granted.grant_id, granted.asu,
                                                                           ["profile"], CHALLENGE)
    assert code.resources == []  # a code naming no resource (RFC 8707): never NULL
    assert (code.auth_time, code.amr) == (NOW - 30, "pwd otp mfa")  # the sign-in, for its tokens



async def test_a_code_without_a_transaction_only_under_a_grant_that_already_covers_it(
        db: Database, granted: Granted) -> None:
    """The authorization endpoint's one-round-trip path: a code only when the live grant (scopes
    ["userinfo"]) already holds every scope asked for; otherwise nothing is written and the caller
    runs the transaction that creates or extends the grant."""
    def issue(conn: Connection, user_id: str, scopes: list[str], code_hash: str) -> bool:
        return codes_repo.insert_under_covering_grant(
            conn, user_id=user_id, app_id=granted.app.id, code_hash=code_hash, redirect_uri="https://app.example/cb",
            scopes=scopes, challenge=None, now=NOW, expires_at=NOW + 300, authentication=SIGNED_IN)

    assert await db.transaction(issue, "usr_nobody", ["userinfo"], "e" * 64, single_statement=True) is False
    assert await db.transaction(issue, granted.user.id, ["userinfo", "profile"], "f" * 64,
                                single_statement=True) is False
    assert await db.read(codes_repo.by_hash, "e" * 64) is None
    assert await db.read(codes_repo.by_hash, "f" * 64) is None

    assert await db.transaction(issue, granted.user.id, ["userinfo"], "g" * 64, single_statement=True) is True
    code = await db.read(codes_repo.by_hash, "g" * 64)
    assert code is not None
    assert (code.grant_id, code.asu, code.scopes) == (granted.grant_id, granted.asu, ["userinfo"])

# ---- the redemption's rules: the claim and the explanation of a failed claim agree ---------------------

OTHER_CHALLENGE = "A" * 43


class _Undo(Exception):
    """Rolls a combination's unit of work back, carrying what it found: each starts from a fresh code."""


def _judged(conn: Connection, *, app_id: str, granted: Granted, challenge: str | None, expires_at: int,
            used: bool, revoked: bool, redemption: dict[str, object]) -> tuple[CodeState | None, ClaimedCode | None]:
    """A fresh code in the given state, explained and then claimed with the same arguments, rolled back."""
    codes_repo.insert_code(conn, code_hash="c" * 64, app_id=app_id, user_id=granted.user.id,
                           grant_id=granted.grant_id, asu=granted.asu, redirect_uri="https://app.example/cb",
                           scopes=["userinfo"], code_challenge=challenge, now=NOW, expires_at=expires_at,
                           authentication=SIGNED_IN)
    conn.execute(update(codes_model).values(used_at=NOW + 1 if used else None, revoked_at=NOW + 1 if revoked else None))
    explained = codes_repo.explain(conn, **{k: v for k, v in redemption.items() if k in _EXPLAINED})
    raise _Undo(explained, codes_repo.redeem(conn, **redemption))


_EXPLAINED = ("code_hash", "client_id", "client_secret_hash", "redirect_uri", "challenge", "now")


@pytest.mark.parametrize("owner", ["this client", "another app", "a wrong secret"])
async def test_a_code_is_claimed_exactly_when_it_breaks_no_rule(db: Database, granted: Granted, owner: str) -> None:
    """For every combination of a code's state and a request's fault, the claim's WHERE clause and
    `explain` judge alike: the code is claimed iff `explain` finds no rule broken, and the rules it
    finds are the faults of the combination, in CodeRule order."""
    await add_app(db, granted.user, app_id="app_2", client_id="cid_2")
    combinations = itertools.product([False, True], [False, True], [False, True], [False, True],
                                     [None, CHALLENGE], [None, CHALLENGE, OTHER_CHALLENGE])
    for revoked, used, expired, other_redirect, stored_challenge, sent_challenge in combinations:
        expected = tuple(rule for rule, broken in [
            (CodeRule.ISSUED_TO_CLIENT, owner != "this client"), (CodeRule.NOT_REVOKED, revoked),
            (CodeRule.UNUSED, used), (CodeRule.UNEXPIRED, expired), (CodeRule.SAME_REDIRECT_URI, other_redirect),
            (CodeRule.PKCE_VERIFIED, stored_challenge != sent_challenge)] if broken)
        redemption = _redeem_args(client_secret_hash="x" * 64 if owner == "a wrong secret" else "s" * 64,
                                  redirect_uri="https://app.example/other" if other_redirect else "https://app.example/cb",
                                  challenge=sent_challenge)
        with pytest.raises(_Undo) as undone:
            await db.transaction(_judged, app_id="app_2" if owner == "another app" else "app_1", granted=granted,
                                 challenge=stored_challenge, expires_at=NOW + 10 if expired else NOW + 300,
                                 used=used, revoked=revoked, redemption=redemption)  # NOW + 10: expired at `now`
        state, claimed = undone.value.args
        assert state is not None and state.broken == expected, (owner, expected, state)
        assert (claimed is not None) == (not expected), (owner, expected)
        assert state.has_challenge == (stored_challenge is not None)


async def test_explain_knows_no_code_it_was_not_given(db: Database, granted: Granted) -> None:
    assert await db.read(codes_repo.explain, code_hash="z" * 64, client_id="cid_1", client_secret_hash="s" * 64,
                         redirect_uri="https://app.example/cb", challenge=None, now=NOW) is None
