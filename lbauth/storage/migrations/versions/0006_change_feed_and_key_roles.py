"""the change feed and signing-key roles (contracts 7, 8 and 16)

`revocations` becomes `changes`, named for what it carries: revoked grants and access tokens, and
also ended sessions and changed users; its `revoked_at` becomes `changed_at`.

Signing keys get a `role`: the one active key that signs access tokens (`access_tokens`), or a key
for the ID tokens of its algorithm (`id_tokens`). The backfill gives the access-token role to the
key that signs access tokens today: the active key of LBAUTH_SIGNING_ALG (handed over by
lbauth.storage.migrate), else the oldest active key (on a tie, not the RS256 one: the first start
makes the access-token key first).

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import context, op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_ACTIVE_ACCESS = sa.text("state = 'active' AND role = 'access_tokens'")


def _rename_feed(old: str, new: str, old_time: str, new_time: str) -> None:
    op.drop_index(f"ix_{old}_expires_at", table_name=old)
    op.rename_table(old, new)
    op.execute(f"ALTER TABLE {new} RENAME COLUMN {old_time} TO {new_time}")
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE {new} RENAME CONSTRAINT pk_{old} TO pk_{new}")
        op.execute(f"ALTER SEQUENCE IF EXISTS {old}_id_seq RENAME TO {new}_id_seq")
    op.create_index(f"ix_{new}_expires_at", new, ["expires_at"], unique=False)


def _access_token_key(active: list[tuple[str, str, int]], signing_alg: str) -> str | None:
    """The kid of the key that signed access tokens before roles were stored."""
    for kid, alg, _created_at in active:
        if alg == signing_alg:
            return kid
    oldest = sorted(active, key=lambda key: (key[2], key[1] == "RS256", key[0]))
    return oldest[0][0] if oldest else None


def upgrade() -> None:
    _rename_feed("revocations", "changes", "revoked_at", "changed_at")
    with op.batch_alter_table("signing_keys") as batch:
        batch.add_column(sa.Column("role", sa.String(length=16), nullable=False,
                                   server_default=sa.text("'id_tokens'")))
    bind = op.get_bind()
    active = [(kid, alg, created_at) for kid, alg, created_at in bind.execute(
        sa.text("SELECT kid, alg, created_at FROM signing_keys WHERE state = 'active'"))]
    kid = _access_token_key(active, context.config.attributes.get("signing_alg", "ES256"))
    if kid is not None:
        bind.execute(sa.text("UPDATE signing_keys SET role = 'access_tokens' WHERE kid = :kid"), {"kid": kid})
    op.create_index("uq_signing_keys_access_tokens", "signing_keys", ["role"], unique=True,
                    sqlite_where=_ACTIVE_ACCESS, postgresql_where=_ACTIVE_ACCESS)


def downgrade() -> None:
    op.drop_index("uq_signing_keys_access_tokens", table_name="signing_keys")
    with op.batch_alter_table("signing_keys") as batch:
        batch.drop_column("role")
    _rename_feed("changes", "revocations", "changed_at", "revoked_at")
