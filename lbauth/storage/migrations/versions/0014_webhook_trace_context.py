"""The trace a webhook event belongs to (W3C Trace Context; contract section 21)

The `traceparent` of the request whose change queued the event, so that whichever process delivers
it later continues that trace and sends the header on. Empty when tracing is off.

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("webhook_events") as batch:
        batch.add_column(sa.Column("traceparent", sa.String(length=55), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("webhook_events") as batch:
        batch.drop_column("traceparent")
