"""DPoP (RFC 9449; contract section 20)

The proofs seen at lbauth (each key and `jti`, by digest, until too old to be accepted anyway), so
that a proof works once across every process; the key a code is bound to (`dpop_jkt` at /oauth/ or
in a pushed request), and the key a public client's refresh token is bound to.

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dpop_proofs",
        sa.Column("proof_hash", sa.String(length=64), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("proof_hash", name="pk_dpop_proofs"),
    )
    op.create_index("ix_dpop_proofs_expires_at", "dpop_proofs", ["expires_at"], unique=False)
    with op.batch_alter_table("authorization_codes") as batch:
        batch.add_column(sa.Column("dpop_jkt", sa.String(length=64), nullable=True))
    with op.batch_alter_table("refresh_tokens") as batch:
        batch.add_column(sa.Column("dpop_jkt", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("refresh_tokens") as batch:
        batch.drop_column("dpop_jkt")
    with op.batch_alter_table("authorization_codes") as batch:
        batch.drop_column("dpop_jkt")
    op.drop_index("ix_dpop_proofs_expires_at", table_name="dpop_proofs")
    op.drop_table("dpop_proofs")
