"""What a sign-in proved, carried to the tokens (contract section 19)

Codes and refresh tokens keep the `amr` of the session that led to them (RFC 8176 values,
space-separated), and from now on their `auth_time` for every grant, not only OpenID ones, so
that access tokens can carry `acr`, `amr` and `auth_time` (RFC 9068 2.2.1) and a refresh keeps
them.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("authorization_codes", "refresh_tokens"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("amr", sa.String(length=64), nullable=False, server_default="pwd"))


def downgrade() -> None:
    for table in ("refresh_tokens", "authorization_codes"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("amr")
