"""Authorization codes: issued once, redeemed at most once (spec section 2).

The hot-path statements are built once, with bind parameters: SQLAlchemy then reuses their
compiled form without rebuilding the expression on every request (docs/performance.md).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Connection,
    String,
    and_,
    bindparam,
    exists,
    insert,
    literal_column,
    or_,
    select,
    text,
    true,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql.dml import ReturningInsert
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.selectable import CTE

from lbauth.storage import Duplicate
from lbauth.storage.models import apps, dpop_proofs, grants, refresh_tokens, subjects, users
from lbauth.storage.models import authorization_codes as codes
from lbauth.storage.records import (
    DPOP_ANY_KEY,
    Authentication,
    ClaimedCode,
    Code,
    CodeGrant,
    CodeRule,
    CodeState,
    OpenIdDetails,
    ProvenKey,
)
from lbauth.storage.repo import dpop as dpop_repo
from lbauth.storage.repo import shaped

# Bind parameters are named p_*: SQLAlchemy reserves column names for the VALUES and SET clauses.
# Typed: PostgreSQL must know their types where they feed an INSERT ... SELECT.
_NOW, _CHALLENGE = bindparam("p_now", type_=BigInteger), bindparam("p_challenge", type_=String)
_CODE_HASH, _REDIRECT_URI = bindparam("p_code_hash", type_=String), bindparam("p_redirect_uri", type_=String)
_DPOP_JKT = bindparam("p_dpop_jkt", type_=String)  # the proof's key (RFC 9449), NULL without one

_CLIENT = (select(apps.c.id)
           .where(apps.c.client_id == bindparam("p_client_id"),
                  apps.c.client_secret_hash == bindparam("p_client_secret_hash"))
           .scalar_subquery())

# The redemption's rules, each once: the claim's WHERE clause is all of them, and `explain` reads
# each one's truth for a code that was not claimed. The client's credentials are matched here too,
# by digest, like the code itself: a wrong secret claims nothing.
_RULES: dict[CodeRule, ColumnElement[bool]] = {
    CodeRule.ISSUED_TO_CLIENT: codes.c.app_id == _CLIENT,
    CodeRule.NOT_REVOKED: codes.c.revoked_at.is_(None),
    CodeRule.UNUSED: codes.c.used_at.is_(None),
    CodeRule.UNEXPIRED: codes.c.expires_at > _NOW,
    CodeRule.SAME_REDIRECT_URI: codes.c.redirect_uri == _REDIRECT_URI,
    CodeRule.PKCE_VERIFIED: codes.c.code_challenge.is_not_distinct_from(_CHALLENGE),
    CodeRule.SAME_DPOP_KEY: or_(codes.c.dpop_jkt.is_(None), codes.c.dpop_jkt == _DPOP_JKT,
                                and_(codes.c.dpop_jkt == DPOP_ANY_KEY, _DPOP_JKT.is_not(None))),
}
assert list(_RULES) == list(CodeRule), "one SQL condition per rule, in the rules' order"

# Of any number of concurrent claims exactly one matches `used_at IS NULL` (STYLE habit 5);
# nothing is consumed when a rule fails.
_CLAIM = shaped(ClaimedCode,
                update(codes)
                .where(codes.c.code_hash == _CODE_HASH, *_RULES.values())
                .values(used_at=_NOW, access_jti=bindparam("p_access_jti"))
                .returning(codes.c.app_id, codes.c.user_id, codes.c.grant_id, codes.c.asu, codes.c.scopes,
                           codes.c.id_token_alg, codes.c.nonce, codes.c.auth_time, codes.c.session_id,
                           codes.c.resources, codes.c.amr))

# PostgreSQL: claim and store the refresh token in one statement (data-modifying CTEs), one round
# trip; both run to completion whatever the outer SELECT reads. SQLite has no data-modifying CTEs:
# there the claim's RETURNING row feeds an insert.
def _stored(claimed: CTE) -> CTE:
    """The refresh token of the code `claimed` returns, stored (a CTE of the redemption)."""
    return (insert(refresh_tokens)
            .from_select(["token_hash", "app_id", "user_id", "grant_id", "code_hash", "asu", "scopes", "created_at",
                          "expires_at", "auth_time", "session_id", "resources", "amr", "dpop_jkt"],
                         select(bindparam("p_refresh_hash", type_=String), claimed.c.app_id, claimed.c.user_id,
                                claimed.c.grant_id, _CODE_HASH, claimed.c.asu, claimed.c.scopes, _NOW,
                                bindparam("p_refresh_expires_at", type_=BigInteger), claimed.c.auth_time,
                                claimed.c.session_id, claimed.c.resources, claimed.c.amr,
                                bindparam("p_refresh_jkt", type_=String)))
            .returning(refresh_tokens.c.token_hash)
            .cte("stored"))


_CLAIMED = _CLAIM.cte("claimed")
_REDEEM_IN_ONE = shaped(ClaimedCode, select(*_CLAIMED.c).add_cte(_stored(_CLAIMED)))

# With a DPoP proof (RFC 9449 11.1), PostgreSQL records its single use in the same statement, and
# the claim depends on it: a proof seen before claims nothing. The outer join answers a row for a
# fresh proof whether or not the code was claimed, and none for a proof seen before.
_SEEN = (postgresql.insert(dpop_proofs)
         .values(proof_hash=bindparam("p_proof_hash", type_=String),
                 expires_at=bindparam("p_proof_expires_at", type_=BigInteger))
         .on_conflict_do_nothing(index_elements=["proof_hash"])
         .returning(dpop_proofs.c.proof_hash)
         .cte("seen"))
_CLAIMED_WITH_PROOF = _CLAIM.where(exists(select(_SEEN.c.proof_hash))).cte("claimed")
_REDEEM_WITH_PROOF_IN_ONE = shaped(
    ClaimedCode, select(*_CLAIMED_WITH_PROOF.c)
    .select_from(_SEEN.outerjoin(_CLAIMED_WITH_PROOF, true()))
    .add_cte(_stored(_CLAIMED_WITH_PROOF)))
_STORE = insert(refresh_tokens)

# The grant already holds every scope asked for (JSON arrays of strings on both databases).
_COVERS = {
    "postgresql": "CAST(grants.scopes AS JSONB) @> CAST(:p_scopes AS JSONB)",
    "sqlite": "NOT EXISTS (SELECT 1 FROM json_each(:p_scopes) AS asked "
              "WHERE asked.value NOT IN (SELECT held.value FROM json_each(grants.scopes) AS held))",
}


def _code_from_grant(with_resources: bool, covering: str | None = None) -> ReturningInsert[Any]:
    """The code-issuing statement of `insert_from_live_grant`. A request naming no resource (RFC
    8707) leaves the code's `resources` to its default and reads none of the grant's: the hot path
    stays as it was before resources existed. `covering` (a dialect's name): only under a grant
    that already holds every scope asked for."""
    columns = ["code_hash", "app_id", "user_id", "grant_id", "asu", "redirect_uri", "scopes", "code_challenge",
               "created_at", "expires_at", "id_token_alg", "nonce", "auth_time", "session_id", "amr", "dpop_jkt"]
    values = [_CODE_HASH, grants.c.app_id, grants.c.user_id, grants.c.id, subjects.c.asu, _REDIRECT_URI,
              bindparam("p_scopes", type_=JSON), _CHALLENGE, _NOW, bindparam("p_expires_at", type_=BigInteger),
              bindparam("p_id_token_alg", type_=String), bindparam("p_nonce", type_=String),
              bindparam("p_auth_time", type_=BigInteger), bindparam("p_session_id", type_=String),
              bindparam("p_amr", type_=String), _DPOP_JKT]
    grant_resources = literal_column("NULL", JSON)
    if with_resources:
        columns.append("resources")
        values.append(bindparam("p_resources", type_=JSON))
        grant_resources = literal_column(
            "(SELECT g.resources FROM grants AS g WHERE g.id = authorization_codes.grant_id)", JSON)
    return shaped(
        CodeGrant,
        insert(codes)
        .from_select(columns,
                     select(*values)
                     .join_from(grants, subjects,
                                (subjects.c.app_id == grants.c.app_id) & (subjects.c.user_id == grants.c.user_id))
                     .join(users, users.c.id == grants.c.user_id)
                     .where(grants.c.user_id == bindparam("p_user_id"), grants.c.app_id == bindparam("p_app_id"),
                            grants.c.revoked_at.is_(None), users.c.disabled_at.is_(None),
                            *([text(_COVERS[covering]).bindparams(bindparam("p_scopes", type_=JSON))]
                              if covering else []))
                     # PostgreSQL: a revocation, disable or deletion under way updates one of these rows;
                     # the lock waits for it and then sees its outcome (no code is issued after its
                     # codes were revoked), or makes it wait and then revoke this code too. Locked in
                     # the order named (the user's row first), as every change to both takes them.
                     .with_for_update(read=True, of=[users, grants]))
        # The grant's scopes (and resources), to extend it if this approval asks for more. Written
        # out: SQLite allows a subquery in RETURNING, but SQLAlchemy does not correlate one there.
        .returning(codes.c.grant_id, literal_column(
            "(SELECT g.scopes FROM grants AS g WHERE g.id = authorization_codes.grant_id)", JSON).label("grant_scopes"),
                   grant_resources.label("grant_resources")))


_FROM_GRANT = _code_from_grant(with_resources=False)
_FROM_GRANT_FOR_RESOURCES = _code_from_grant(with_resources=True)
_FROM_COVERING_GRANT = {dialect: _code_from_grant(with_resources=False, covering=dialect) for dialect in _COVERS}


def insert_code(conn: Connection, *, code_hash: str, app_id: str, user_id: str, grant_id: str, asu: str,
                redirect_uri: str, scopes: list[str], code_challenge: str | None, now: int, expires_at: int,
                authentication: Authentication, openid: OpenIdDetails | None = None,
                resources: list[str] | None = None, dpop_jkt: str | None = None) -> None:
    conn.execute(insert(codes).values(code_hash=code_hash, app_id=app_id, user_id=user_id, grant_id=grant_id, asu=asu,
                                      redirect_uri=redirect_uri, scopes=scopes, code_challenge=code_challenge,
                                      created_at=now, expires_at=expires_at, resources=resources or [],
                                      **_sign_in_values(authentication, openid, dpop_jkt)))


def _sign_in_values(authentication: Authentication, openid: OpenIdDetails | None,
                    dpop_jkt: str | None) -> dict[str, object]:
    """The sign-in every code remembers, the key it is bound to (RFC 9449 10), and an OpenID
    request's ID-token details (NULL otherwise)."""
    values: dict[str, object] = {"auth_time": authentication.auth_time, "amr": authentication.amr,
                                 "dpop_jkt": dpop_jkt}
    if openid is None:
        return {**values, "id_token_alg": None, "nonce": None, "session_id": None}
    return {**values, "id_token_alg": openid.id_token_alg, "nonce": openid.nonce, "session_id": openid.session_id}


def insert_from_live_grant(conn: Connection, *, user_id: str, app_id: str, code_hash: str, redirect_uri: str,
                           scopes: list[str], challenge: str | None, now: int, expires_at: int,
                           authentication: Authentication, openid: OpenIdDetails | None = None,
                           resources: list[str] | None = None, dpop_jkt: str | None = None) -> CodeGrant | None:
    """A code under the user's live grant for the app, in one statement: its grant id and the
    grant's scopes, or None when there is no live grant (the caller creates one) or the user is
    disabled or deleted (contract 16: no new code, whatever a process's cache still believes)."""
    params = {"p_user_id": user_id, "p_app_id": app_id, "p_code_hash": code_hash, "p_redirect_uri": redirect_uri,
              "p_scopes": scopes, "p_challenge": challenge, "p_now": now, "p_expires_at": expires_at,
              **{f"p_{k}": v for k, v in _sign_in_values(authentication, openid, dpop_jkt).items()}}
    if resources:
        row = conn.execute(_FROM_GRANT_FOR_RESOURCES, {**params, "p_resources": resources}).first()
    else:
        row = conn.execute(_FROM_GRANT, params).first()
    return CodeGrant(*row) if row is not None else None


def insert_under_covering_grant(conn: Connection, *, user_id: str, app_id: str, code_hash: str, redirect_uri: str,
                                scopes: list[str], challenge: str | None, now: int, expires_at: int,
                                authentication: Authentication, openid: OpenIdDetails | None = None,
                                dpop_jkt: str | None = None) -> bool:
    """A code under the user's live grant for the app when that grant already holds every scope
    asked for, in one statement that needs no transaction around it; False, having changed
    nothing, otherwise (no live grant, a grant to extend, a disabled or deleted user)."""
    params = {"p_user_id": user_id, "p_app_id": app_id, "p_code_hash": code_hash, "p_redirect_uri": redirect_uri,
              "p_scopes": scopes, "p_challenge": challenge, "p_now": now, "p_expires_at": expires_at,
              **{f"p_{k}": v for k, v in _sign_in_values(authentication, openid, dpop_jkt).items()}}
    return conn.execute(_FROM_COVERING_GRANT[conn.dialect.name], params).first() is not None


def redeem(conn: Connection, *, code_hash: str, client_id: str, client_secret_hash: str, redirect_uri: str,
           challenge: str | None, now: int, access_jti: str, refresh_hash: str, refresh_expires_at: int,
           dpop_jkt: str | None = None, refresh_jkt: str | None = None, proof: ProvenKey | None = None,
           ) -> ClaimedCode | None:
    """Claim the code and store its refresh token, if and only if the client, the redirect URI,
    the PKCE challenge and the code's state are all right: what the code was issued for, or None,
    having changed nothing. With `proof`, its single use is recorded first, and a proof seen
    before raises Duplicate, having changed nothing."""
    params = {"p_code_hash": code_hash, "p_client_id": client_id, "p_client_secret_hash": client_secret_hash,
              "p_redirect_uri": redirect_uri, "p_challenge": challenge, "p_now": now, "p_access_jti": access_jti,
              "p_refresh_hash": refresh_hash, "p_refresh_expires_at": refresh_expires_at, "p_dpop_jkt": dpop_jkt,
              "p_refresh_jkt": refresh_jkt}
    if conn.dialect.name == "postgresql":
        if proof is None:
            row = conn.execute(_REDEEM_IN_ONE, params).first()
            return ClaimedCode(*row) if row is not None else None
        row = conn.execute(_REDEEM_WITH_PROOF_IN_ONE, {**params, "p_proof_hash": proof.proof_hash,
                                                       "p_proof_expires_at": proof.remember_until}).first()
        if row is None:
            raise Duplicate("DPoP proof")
        return ClaimedCode(*row) if row.app_id is not None else None
    if proof is not None:
        dpop_repo.spend(conn, proof)
    row = conn.execute(_CLAIM, params).first()
    if row is None:
        return None
    claimed = ClaimedCode(*row)
    conn.execute(_STORE, {"token_hash": refresh_hash, "app_id": claimed.app_id, "user_id": claimed.user_id,
                          "grant_id": claimed.grant_id, "code_hash": code_hash, "asu": claimed.asu,
                          "scopes": claimed.scopes, "created_at": now, "expires_at": refresh_expires_at,
                          "auth_time": claimed.auth_time, "session_id": claimed.session_id,
                          "resources": claimed.resources, "amr": claimed.amr, "dpop_jkt": refresh_jkt})
    return claimed


_EXPLAIN = (select(codes.c.grant_id, codes.c.resources, codes.c.code_challenge.is_not(None),
                   *(rule.label(name.value) for name, rule in _RULES.items()))
            .where(codes.c.code_hash == _CODE_HASH))


def explain(conn: Connection, *, code_hash: str, client_id: str, client_secret_hash: str, redirect_uri: str,
            challenge: str | None, now: int, dpop_jkt: str | None = None) -> CodeState | None:
    """Which rules the code breaks for a redemption with these arguments (`redeem`'s), judged by
    the very conditions the claim applies; None when there is no such code."""
    row = conn.execute(_EXPLAIN, {"p_code_hash": code_hash, "p_client_id": client_id,
                                  "p_client_secret_hash": client_secret_hash, "p_redirect_uri": redirect_uri,
                                  "p_challenge": challenge, "p_now": now, "p_dpop_jkt": dpop_jkt}).first()
    if row is None:
        return None
    grant_id, resources, has_challenge, *holds = row
    broken = tuple(rule for rule, held in zip(CodeRule, holds, strict=True) if not held)  # NULL: not held
    return CodeState(broken, grant_id, resources, bool(has_challenge))


def by_hash(conn: Connection, code_hash: str) -> Code | None:
    row = conn.execute(select(codes).where(codes.c.code_hash == code_hash)).first()
    return Code(*row) if row is not None else None


def revoke_for_grant(conn: Connection, grant_id: str, now: int) -> None:
    conn.execute(update(codes).where(codes.c.grant_id == grant_id, codes.c.used_at.is_(None),
                                     codes.c.revoked_at.is_(None)).values(revoked_at=now))
