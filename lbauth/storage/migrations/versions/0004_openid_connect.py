"""OpenID Connect (contract sections 8 and 15)

One active signing key per algorithm; users' email_verified; a session's last sign-in; an app's
ID-token algorithm and post-logout redirect URIs; what a code and a refresh token of an OpenID
grant need for their ID tokens.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("email_verified", sa.Boolean(), nullable=False, server_default=sa.text("false")))
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("authenticated_at", sa.BigInteger(), nullable=False, server_default=sa.text("0")))
    op.execute("UPDATE sessions SET authenticated_at = created_at")
    with op.batch_alter_table("apps") as batch:
        batch.add_column(sa.Column("id_token_alg", sa.String(length=16), nullable=False,
                                   server_default=sa.text("'RS256'")))
        batch.add_column(sa.Column("post_logout_redirect_uris", sa.JSON(), nullable=False,
                                   server_default=sa.text("'[]'")))
    with op.batch_alter_table("authorization_codes") as batch:
        batch.add_column(sa.Column("id_token_alg", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("nonce", sa.Text(), nullable=True))
        batch.add_column(sa.Column("auth_time", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("session_id", sa.String(length=40), nullable=True))
    with op.batch_alter_table("refresh_tokens") as batch:
        batch.add_column(sa.Column("auth_time", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("session_id", sa.String(length=40), nullable=True))
    op.drop_index("uq_signing_keys_active", table_name="signing_keys")
    op.create_index("uq_signing_keys_active", "signing_keys", ["alg"], unique=True,
                    sqlite_where=sa.text("state = 'active'"), postgresql_where=sa.text("state = 'active'"))


def downgrade() -> None:
    with op.batch_alter_table("refresh_tokens") as batch:
        batch.drop_column("session_id")
        batch.drop_column("auth_time")
    with op.batch_alter_table("authorization_codes") as batch:
        for column in ("session_id", "auth_time", "nonce", "id_token_alg"):
            batch.drop_column(column)
    with op.batch_alter_table("apps") as batch:
        batch.drop_column("post_logout_redirect_uris")
        batch.drop_column("id_token_alg")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("authenticated_at")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("email_verified")
    op.drop_index("uq_signing_keys_active", table_name="signing_keys")
    op.create_index("uq_signing_keys_active", "signing_keys", ["state"], unique=True,
                    sqlite_where=sa.text("state = 'active'"), postgresql_where=sa.text("state = 'active'"))
