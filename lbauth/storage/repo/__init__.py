"""Repository functions: plain functions of a SQLAlchemy Connection, one statement or a few each.

They never commit: the use case that calls them owns the transaction (lbauth.storage.db).
"""
