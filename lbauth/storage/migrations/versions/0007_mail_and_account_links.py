"""Sign-up, email and account recovery (contract section 18)

The mail outbox (`mail_messages`) and the tokens of emailed links (`link_tokens`).

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "mail_messages",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("recipient", sa.String(length=320), nullable=False),
        sa.Column("params_sealed", sa.Text(), nullable=False),
        sa.Column("letter_sealed", sa.Text(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("round_attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("next_attempt_at", sa.BigInteger(), nullable=True),
        sa.Column("lease_until", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("sent_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_mail_messages"),
    )
    op.create_index("ix_mail_messages_due", "mail_messages", ["status", "next_attempt_at"], unique=False)
    op.create_table(
        "link_tokens",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("user_id", sa.String(length=40), nullable=True),
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column("payload_sealed", sa.Text(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.Column("used_at", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name="fk_link_tokens_user_id_users", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("token_hash", name="pk_link_tokens"),
    )
    op.create_index("ix_link_tokens_user_id", "link_tokens", ["user_id"], unique=False)
    op.create_index("ix_link_tokens_expires_at", "link_tokens", ["expires_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_link_tokens_expires_at", table_name="link_tokens")
    op.drop_index("ix_link_tokens_user_id", table_name="link_tokens")
    op.drop_table("link_tokens")
    op.drop_index("ix_mail_messages_due", table_name="mail_messages")
    op.drop_table("mail_messages")
