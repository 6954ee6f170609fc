"""Alembic environment. lbauth always hands Alembic an open connection (see lbauth.storage.migrate),
so migrations run inside the caller's event loop and transaction; there is no alembic.ini."""

from alembic import context

from lbauth.storage.models import Base

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying them
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
