"""Storage: the engine and transactions (db), the schema (models), repository functions
(repo), and Alembic migrations (migrate, migrations/)."""
