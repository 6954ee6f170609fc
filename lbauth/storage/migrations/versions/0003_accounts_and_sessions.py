"""accounts and sessions (contract section 16)

`user_tokens` become `sessions`, with an id, a kind, last use, user agent and address; users can
be disabled and deleted; the check-list carries session and user entries to every process.

Revision ID: 0003
Revises: 0002
"""

import secrets

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    sessions = op.create_table(
        "sessions",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=40), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("last_used_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.Column("ended_at", sa.BigInteger(), nullable=True),
        sa.Column("user_agent", sa.String(length=200), nullable=False),
        sa.Column("ip_address", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_sessions_user_id_users"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sessions")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_sessions_token_hash")),
    )
    op.create_index(op.f("ix_sessions_user_id"), "sessions", ["user_id"], unique=False)
    # Live user tokens carry over as API sessions (a browser cookie holds the same kind of token).
    bind = op.get_bind()
    rows = bind.execute(sa.text("SELECT token_hash, user_id, created_at, expires_at, revoked_at FROM user_tokens"))
    carried = [{"id": "ses_" + secrets.token_urlsafe(16), "token_hash": r[0], "user_id": r[1], "kind": "api",
                "created_at": r[2], "last_used_at": r[2], "expires_at": r[3], "ended_at": r[4], "user_agent": "",
                "ip_address": ""} for r in rows]
    if carried:
        op.bulk_insert(sessions, carried)
    op.drop_index(op.f("ix_user_tokens_user_id"), table_name="user_tokens")
    op.drop_table("user_tokens")
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("disabled_at", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("deleted_at", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("revocations") as batch:
        batch.add_column(sa.Column("session_id", sa.String(length=40), nullable=True))
        batch.add_column(sa.Column("user_id", sa.String(length=40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("revocations") as batch:
        batch.drop_column("user_id")
        batch.drop_column("session_id")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("deleted_at")
        batch.drop_column("disabled_at")
    op.create_table(
        "user_tokens",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.Column("revoked_at", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_user_tokens_user_id_users"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("token_hash", name=op.f("pk_user_tokens")),
    )
    op.create_index(op.f("ix_user_tokens_user_id"), "user_tokens", ["user_id"], unique=False)
    op.execute("INSERT INTO user_tokens (token_hash, user_id, created_at, expires_at, revoked_at) "
               "SELECT token_hash, user_id, created_at, expires_at, ended_at FROM sessions")
    op.drop_index(op.f("ix_sessions_user_id"), table_name="sessions")
    op.drop_table("sessions")
