"""Pushed authorization requests (RFC 9126; contract section 20)

The parameters a client pushed, by the digest of the `request_uri` it was given, until a code or
an error goes back to it.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pushed_requests",
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("app_id", sa.String(length=40), nullable=False),
        sa.Column("parameters", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.Column("first_used_at", sa.BigInteger(), nullable=True),
        sa.Column("completed_at", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(["app_id"], ["apps.id"], name="fk_pushed_requests_app_id_apps", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("request_hash", name="pk_pushed_requests"),
    )
    op.create_index("ix_pushed_requests_app_id", "pushed_requests", ["app_id"], unique=False)
    op.create_index("ix_pushed_requests_expires_at", "pushed_requests", ["expires_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_pushed_requests_expires_at", table_name="pushed_requests")
    op.drop_index("ix_pushed_requests_app_id", table_name="pushed_requests")
    op.drop_table("pushed_requests")
