"""The results store: SQLAlchemy 2 models, Alembic migrations, and the session factory.

Only the controller writes; the CLI opens it read-only for queries.
"""
