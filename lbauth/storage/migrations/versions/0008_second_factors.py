"""Second factors and what a sign-in proved (contract section 19)

TOTP secrets (sealed under the master key) and recovery codes (by digest); `users.mfa`, set while
a user has a second factor, so that a user without one costs nothing more at sign-in; and what a
session's sign-in proved (RFC 8176 `amr` values, space-separated).

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("mfa", sa.Boolean(), nullable=False, server_default=sa.text("false")))
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("amr", sa.String(length=64), nullable=False, server_default="pwd"))
    op.create_table(
        "totp_factors",
        sa.Column("user_id", sa.String(length=40), nullable=False),
        sa.Column("secret_sealed", sa.Text(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("confirmed_at", sa.BigInteger(), nullable=True),
        sa.Column("last_step", sa.BigInteger(), nullable=False, server_default="0"),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name="fk_totp_factors_user_id_users", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("user_id", name="pk_totp_factors"),
    )
    op.create_table(
        "recovery_codes",
        sa.Column("code_hash", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.String(length=40), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("used_at", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name="fk_recovery_codes_user_id_users", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("code_hash", name="pk_recovery_codes"),
    )
    op.create_index("ix_recovery_codes_user_id", "recovery_codes", ["user_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_recovery_codes_user_id", table_name="recovery_codes")
    op.drop_table("recovery_codes")
    op.drop_table("totp_factors")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("amr")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("mfa")
