"""Agents and public clients (contract section 17)

Apps without an owner (registered by themselves: RFC 7591, or a client ID metadata document whose
URL is the client id), public apps (`token_endpoint_auth_method` none), protected resources
(RFC 8707) and the resources of grants, codes and refresh tokens, rotated refresh tokens, and
initial access tokens for registration.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_EMPTY = sa.text("'[]'")


def upgrade() -> None:
    with op.batch_alter_table("apps") as batch:
        batch.alter_column("client_id", existing_type=sa.String(length=64), type_=sa.String(length=2048),
                           existing_nullable=False)
        batch.alter_column("owner_id", existing_type=sa.String(length=40), nullable=True)
        batch.add_column(sa.Column("token_endpoint_auth_method", sa.String(length=32), nullable=False,
                                   server_default=sa.text("'client_secret_basic'")))
        batch.add_column(sa.Column("registration", sa.String(length=16), nullable=False,
                                   server_default=sa.text("'operator'")))
        batch.add_column(sa.Column("registration_token_hash", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("client_metadata", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("document_expires_at", sa.BigInteger(), nullable=True))
    op.create_table(
        "resources",
        sa.Column("uri", sa.String(length=2048), nullable=False),
        sa.Column("normalized", sa.String(length=2048), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("scopes", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("uri", name="pk_resources"),
        sa.UniqueConstraint("normalized", name="uq_resources_normalized"),
    )
    op.create_table(
        "registration_tokens",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("token_hash", name="pk_registration_tokens"),
    )
    for table in ("grants", "authorization_codes", "refresh_tokens"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("resources", sa.JSON(), nullable=False, server_default=_EMPTY))
    with op.batch_alter_table("refresh_tokens") as batch:
        batch.add_column(sa.Column("rotated_at", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("refresh_tokens") as batch:
        batch.drop_column("rotated_at")
    for table in ("refresh_tokens", "authorization_codes", "grants"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("resources")
    op.drop_table("registration_tokens")
    op.drop_table("resources")
    op.execute("DELETE FROM apps WHERE owner_id IS NULL")
    with op.batch_alter_table("apps") as batch:
        for column in ("document_expires_at", "client_metadata", "registration_token_hash", "registration",
                       "token_endpoint_auth_method"):
            batch.drop_column(column)
        batch.alter_column("owner_id", existing_type=sa.String(length=40), nullable=False)
        batch.alter_column("client_id", existing_type=sa.String(length=2048), type_=sa.String(length=64),
                           existing_nullable=False)
