"""The device authorization grant (RFC 8628; contract section 20)

One row per device authorization, by the digests of its device code and of its user code: what the
device asked for, its polling interval, and once the user approved, the grant its tokens are issued
under.

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "device_codes",
        sa.Column("device_code_hash", sa.String(length=64), nullable=False),
        sa.Column("user_code_hash", sa.String(length=64), nullable=False),
        sa.Column("app_id", sa.String(length=40), nullable=False),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column("resources", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.Column("interval", sa.Integer(), nullable=False),
        sa.Column("last_polled_at", sa.BigInteger(), nullable=True),
        sa.Column("user_id", sa.String(length=40), nullable=True),
        sa.Column("grant_id", sa.String(length=40), nullable=True),
        sa.Column("asu", sa.String(length=48), nullable=True),
        sa.Column("approved_at", sa.BigInteger(), nullable=True),
        sa.Column("denied_at", sa.BigInteger(), nullable=True),
        sa.Column("used_at", sa.BigInteger(), nullable=True),
        sa.Column("auth_time", sa.BigInteger(), nullable=True),
        sa.Column("amr", sa.String(length=64), nullable=True),
        sa.Column("session_id", sa.String(length=40), nullable=True),
        sa.Column("id_token_alg", sa.String(length=16), nullable=True),
        sa.ForeignKeyConstraint(["app_id"], ["apps.id"], name="fk_device_codes_app_id_apps", ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["grant_id"], ["grants.id"], name="fk_device_codes_grant_id_grants",
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name="fk_device_codes_user_id_users", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("device_code_hash", name="pk_device_codes"),
        sa.UniqueConstraint("user_code_hash", name="uq_device_codes_user_code_hash"),
    )
    op.create_index("ix_device_codes_app_id", "device_codes", ["app_id"], unique=False)
    op.create_index("ix_device_codes_expires_at", "device_codes", ["expires_at"], unique=False)
    op.create_index("ix_device_codes_grant_id", "device_codes", ["grant_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_device_codes_grant_id", table_name="device_codes")
    op.drop_index("ix_device_codes_expires_at", table_name="device_codes")
    op.drop_index("ix_device_codes_app_id", table_name="device_codes")
    op.drop_table("device_codes")
