"""initial schema

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-22 01:53:37.905724
"""

from alembic import op
import sqlalchemy as sa


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('revocations',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('grant_id', sa.String(length=40), nullable=True),
    sa.Column('jti', sa.String(length=64), nullable=True),
    sa.Column('revoked_at', sa.BigInteger(), nullable=False),
    sa.Column('expires_at', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_revocations'))
    )
    op.create_index(op.f('ix_revocations_expires_at'), 'revocations', ['expires_at'], unique=False)
    op.create_table('signing_keys',
    sa.Column('kid', sa.String(length=64), nullable=False),
    sa.Column('alg', sa.String(length=16), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('public_jwk', sa.JSON(), nullable=False),
    sa.Column('private_key_sealed', sa.Text(), nullable=False),
    sa.Column('created_at', sa.BigInteger(), nullable=False),
    sa.Column('activated_at', sa.BigInteger(), nullable=True),
    sa.Column('deactivated_at', sa.BigInteger(), nullable=True),
    sa.Column('retired_at', sa.BigInteger(), nullable=True),
    sa.PrimaryKeyConstraint('kid', name=op.f('pk_signing_keys'))
    )
    op.create_index('uq_signing_keys_active', 'signing_keys', ['state'], unique=True, sqlite_where=sa.text("state = 'active'"), postgresql_where=sa.text("state = 'active'"))
    op.create_table('users',
    sa.Column('id', sa.String(length=40), nullable=False),
    sa.Column('email', sa.String(length=320), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('avatar', sa.Text(), nullable=False),
    sa.Column('bio', sa.Text(), nullable=False),
    sa.Column('interest_tags', sa.JSON(), nullable=False),
    sa.Column('password_hash', sa.String(length=200), nullable=False),
    sa.Column('created_at', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_users')),
    sa.UniqueConstraint('email', name=op.f('uq_users_email'))
    )
    op.create_table('apps',
    sa.Column('id', sa.String(length=40), nullable=False),
    sa.Column('client_id', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('owner_id', sa.String(length=40), nullable=False),
    sa.Column('client_secret_hash', sa.String(length=64), nullable=False),
    sa.Column('redirect_uris', sa.JSON(), nullable=False),
    sa.Column('scopes', sa.JSON(), nullable=False),
    sa.Column('webhook_url', sa.Text(), nullable=True),
    sa.Column('webhook_secret_sealed', sa.Text(), nullable=False),
    sa.Column('webhook_disabled_at', sa.BigInteger(), nullable=True),
    sa.Column('created_at', sa.BigInteger(), nullable=False),
    sa.Column('updated_at', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['owner_id'], ['users.id'], name=op.f('fk_apps_owner_id_users')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_apps')),
    sa.UniqueConstraint('client_id', name=op.f('uq_apps_client_id'))
    )
    op.create_index(op.f('ix_apps_owner_id'), 'apps', ['owner_id'], unique=False)
    op.create_table('user_tokens',
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('user_id', sa.String(length=40), nullable=False),
    sa.Column('created_at', sa.BigInteger(), nullable=False),
    sa.Column('expires_at', sa.BigInteger(), nullable=False),
    sa.Column('revoked_at', sa.BigInteger(), nullable=True),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_user_tokens_user_id_users'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('token_hash', name=op.f('pk_user_tokens'))
    )
    op.create_index(op.f('ix_user_tokens_user_id'), 'user_tokens', ['user_id'], unique=False)
    op.create_table('grants',
    sa.Column('id', sa.String(length=40), nullable=False),
    sa.Column('app_id', sa.String(length=40), nullable=False),
    sa.Column('user_id', sa.String(length=40), nullable=False),
    sa.Column('scopes', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.BigInteger(), nullable=False),
    sa.Column('updated_at', sa.BigInteger(), nullable=False),
    sa.Column('revoked_at', sa.BigInteger(), nullable=True),
    sa.ForeignKeyConstraint(['app_id'], ['apps.id'], name=op.f('fk_grants_app_id_apps'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_grants_user_id_users'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_grants'))
    )
    op.create_index(op.f('ix_grants_user_id'), 'grants', ['user_id'], unique=False)
    op.create_index('uq_grants_live', 'grants', ['user_id', 'app_id'], unique=True, sqlite_where=sa.text('revoked_at IS NULL'), postgresql_where=sa.text('revoked_at IS NULL'))
    op.create_table('subjects',
    sa.Column('app_id', sa.String(length=40), nullable=False),
    sa.Column('user_id', sa.String(length=40), nullable=False),
    sa.Column('asu', sa.String(length=48), nullable=False),
    sa.Column('created_at', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['app_id'], ['apps.id'], name=op.f('fk_subjects_app_id_apps'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_subjects_user_id_users'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('app_id', 'user_id', name=op.f('pk_subjects')),
    sa.UniqueConstraint('asu', name=op.f('uq_subjects_asu'))
    )
    op.create_table('webhook_events',
    sa.Column('id', sa.String(length=40), nullable=False),
    sa.Column('app_id', sa.String(length=40), nullable=False),
    sa.Column('event_type', sa.String(length=64), nullable=False),
    sa.Column('reason', sa.String(length=32), nullable=False),
    sa.Column('asu', sa.String(length=48), nullable=False),
    sa.Column('payload', sa.Text(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('last_status', sa.Integer(), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('next_attempt_at', sa.BigInteger(), nullable=True),
    sa.Column('lease_until', sa.BigInteger(), nullable=True),
    sa.Column('created_at', sa.BigInteger(), nullable=False),
    sa.Column('delivered_at', sa.BigInteger(), nullable=True),
    sa.ForeignKeyConstraint(['app_id'], ['apps.id'], name=op.f('fk_webhook_events_app_id_apps'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_webhook_events'))
    )
    op.create_index(op.f('ix_webhook_events_app_id'), 'webhook_events', ['app_id'], unique=False)
    op.create_index('ix_webhook_events_due', 'webhook_events', ['status', 'next_attempt_at'], unique=False)
    op.create_table('authorization_codes',
    sa.Column('code_hash', sa.String(length=64), nullable=False),
    sa.Column('app_id', sa.String(length=40), nullable=False),
    sa.Column('user_id', sa.String(length=40), nullable=False),
    sa.Column('grant_id', sa.String(length=40), nullable=False),
    sa.Column('asu', sa.String(length=48), nullable=False),
    sa.Column('redirect_uri', sa.Text(), nullable=False),
    sa.Column('scopes', sa.JSON(), nullable=False),
    sa.Column('code_challenge', sa.String(length=128), nullable=True),
    sa.Column('created_at', sa.BigInteger(), nullable=False),
    sa.Column('expires_at', sa.BigInteger(), nullable=False),
    sa.Column('used_at', sa.BigInteger(), nullable=True),
    sa.Column('revoked_at', sa.BigInteger(), nullable=True),
    sa.Column('access_jti', sa.String(length=64), nullable=True),
    sa.ForeignKeyConstraint(['app_id'], ['apps.id'], name=op.f('fk_authorization_codes_app_id_apps'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['grant_id'], ['grants.id'], name=op.f('fk_authorization_codes_grant_id_grants'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_authorization_codes_user_id_users'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('code_hash', name=op.f('pk_authorization_codes'))
    )
    op.create_index(op.f('ix_authorization_codes_expires_at'), 'authorization_codes', ['expires_at'], unique=False)
    op.create_index(op.f('ix_authorization_codes_grant_id'), 'authorization_codes', ['grant_id'], unique=False)
    op.create_table('refresh_tokens',
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('app_id', sa.String(length=40), nullable=False),
    sa.Column('user_id', sa.String(length=40), nullable=False),
    sa.Column('grant_id', sa.String(length=40), nullable=False),
    sa.Column('code_hash', sa.String(length=64), nullable=True),
    sa.Column('asu', sa.String(length=48), nullable=False),
    sa.Column('scopes', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.BigInteger(), nullable=False),
    sa.Column('expires_at', sa.BigInteger(), nullable=False),
    sa.Column('revoked_at', sa.BigInteger(), nullable=True),
    sa.ForeignKeyConstraint(['app_id'], ['apps.id'], name=op.f('fk_refresh_tokens_app_id_apps'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['grant_id'], ['grants.id'], name=op.f('fk_refresh_tokens_grant_id_grants'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_refresh_tokens_user_id_users'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('token_hash', name=op.f('pk_refresh_tokens'))
    )
    op.create_index(op.f('ix_refresh_tokens_code_hash'), 'refresh_tokens', ['code_hash'], unique=False)
    op.create_index(op.f('ix_refresh_tokens_expires_at'), 'refresh_tokens', ['expires_at'], unique=False)
    op.create_index(op.f('ix_refresh_tokens_grant_id'), 'refresh_tokens', ['grant_id'], unique=False)
    op.create_table('webhook_attempts',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('event_id', sa.String(length=40), nullable=False),
    sa.Column('attempted_at', sa.BigInteger(), nullable=False),
    sa.Column('status', sa.Integer(), nullable=True),
    sa.Column('latency_ms', sa.Integer(), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['event_id'], ['webhook_events.id'], name=op.f('fk_webhook_attempts_event_id_webhook_events'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_webhook_attempts'))
    )
    op.create_index(op.f('ix_webhook_attempts_event_id'), 'webhook_attempts', ['event_id'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_webhook_attempts_event_id'), table_name='webhook_attempts')
    op.drop_table('webhook_attempts')
    op.drop_index(op.f('ix_refresh_tokens_grant_id'), table_name='refresh_tokens')
    op.drop_index(op.f('ix_refresh_tokens_expires_at'), table_name='refresh_tokens')
    op.drop_index(op.f('ix_refresh_tokens_code_hash'), table_name='refresh_tokens')
    op.drop_table('refresh_tokens')
    op.drop_index(op.f('ix_authorization_codes_grant_id'), table_name='authorization_codes')
    op.drop_index(op.f('ix_authorization_codes_expires_at'), table_name='authorization_codes')
    op.drop_table('authorization_codes')
    op.drop_index('ix_webhook_events_due', table_name='webhook_events')
    op.drop_index(op.f('ix_webhook_events_app_id'), table_name='webhook_events')
    op.drop_table('webhook_events')
    op.drop_table('subjects')
    op.drop_index('uq_grants_live', table_name='grants', sqlite_where=sa.text('revoked_at IS NULL'), postgresql_where=sa.text('revoked_at IS NULL'))
    op.drop_index(op.f('ix_grants_user_id'), table_name='grants')
    op.drop_table('grants')
    op.drop_index(op.f('ix_user_tokens_user_id'), table_name='user_tokens')
    op.drop_table('user_tokens')
    op.drop_index(op.f('ix_apps_owner_id'), table_name='apps')
    op.drop_table('apps')
    op.drop_table('users')
    op.drop_index('uq_signing_keys_active', table_name='signing_keys', sqlite_where=sa.text("state = 'active'"), postgresql_where=sa.text("state = 'active'"))
    op.drop_table('signing_keys')
    op.drop_index(op.f('ix_revocations_expires_at'), table_name='revocations')
    op.drop_table('revocations')
