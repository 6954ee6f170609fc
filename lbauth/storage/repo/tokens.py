"""Refresh tokens, by digest. A confidential app's are not rotated, reusable until they expire
(spec section 3); a public client's rotate (contract 17: `rotate`). They are first stored by the
code redemption (repo/codes.py)."""

from __future__ import annotations

from sqlalchemy import Connection, bindparam, insert, select, update

from lbauth.storage.models import apps, grants, refresh_tokens, users
from lbauth.storage.records import ClientRefreshToken, RefreshToken
from lbauth.storage.repo import shaped

# The refresh hot path in one statement: the token, if the client presenting it is its app and
# the secret's digest is right (matched like the token's own digest). Built once: see repo/codes.py.
_FOR_CLIENT = shaped(ClientRefreshToken, select(refresh_tokens, apps.c.id_token_alg)
                     .join(apps, apps.c.id == refresh_tokens.c.app_id)
                     .where(refresh_tokens.c.token_hash == bindparam("token_hash"),
                            apps.c.client_id == bindparam("client_id"),
                            apps.c.client_secret_hash == bindparam("client_secret_hash")))
_ALL = shaped(RefreshToken, select(refresh_tokens))


def by_hash(conn: Connection, token_hash: str) -> RefreshToken | None:
    row = conn.execute(_ALL.where(refresh_tokens.c.token_hash == token_hash)).first()
    return RefreshToken(*row) if row is not None else None


def for_client(conn: Connection, token_hash: str, client_id: str,
               client_secret_hash: str) -> ClientRefreshToken | None:
    row = conn.execute(_FOR_CLIENT, {"token_hash": token_hash, "client_id": client_id,
                                     "client_secret_hash": client_secret_hash}).first()
    return ClientRefreshToken(*row) if row is not None else None


def rotate(conn: Connection, old: RefreshToken, *, new_hash: str, now: int, expires_at: int) -> bool:
    """Retire `old` (rotated_at = now) and store its successor under the same grant, scopes,
    resources, code and OpenID details; False, having changed nothing, if `old` was retired or
    revoked first or its grant is no longer live. Of concurrent rotations of one token exactly
    one claims it (`rotated_at IS NULL`, STYLE habit 5).

    PostgreSQL: the grant and user rows are locked first, as a code is issued (repo/codes.py), in
    the order every revocation takes them: a revocation under way is waited for and then seen, or
    waits and then revokes the successor too (its tokens' update would not see an uncommitted row)."""
    live = conn.execute(select(grants.c.id).join(users, users.c.id == grants.c.user_id)
                        .where(grants.c.id == old.grant_id, grants.c.revoked_at.is_(None),
                               users.c.disabled_at.is_(None))
                        .with_for_update(read=True, of=[users, grants])).first()
    if live is None:
        return False
    claimed = conn.execute(update(refresh_tokens)
                           .where(refresh_tokens.c.token_hash == old.token_hash, refresh_tokens.c.rotated_at.is_(None),
                                  refresh_tokens.c.revoked_at.is_(None))
                           .values(rotated_at=now))
    if claimed.rowcount != 1:
        return False
    conn.execute(insert(refresh_tokens).values(
        token_hash=new_hash, app_id=old.app_id, user_id=old.user_id, grant_id=old.grant_id, code_hash=old.code_hash,
        asu=old.asu, scopes=old.scopes, created_at=now, expires_at=expires_at, auth_time=old.auth_time,
        session_id=old.session_id, resources=old.resources, amr=old.amr, dpop_jkt=old.dpop_jkt))
    return True


def revoke_one(conn: Connection, token_hash: str, now: int) -> None:
    conn.execute(update(refresh_tokens).where(refresh_tokens.c.token_hash == token_hash,
                                              refresh_tokens.c.revoked_at.is_(None)).values(revoked_at=now))


def revoke_from_code(conn: Connection, code_hash: str, now: int) -> None:
    conn.execute(update(refresh_tokens).where(refresh_tokens.c.code_hash == code_hash,
                                              refresh_tokens.c.revoked_at.is_(None)).values(revoked_at=now))


def revoke_for_grant(conn: Connection, grant_id: str, now: int) -> None:
    conn.execute(update(refresh_tokens).where(refresh_tokens.c.grant_id == grant_id,
                                              refresh_tokens.c.revoked_at.is_(None)).values(revoked_at=now))
