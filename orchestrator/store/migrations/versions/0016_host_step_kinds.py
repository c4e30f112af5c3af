"""host step kinds: the step kinds a host's agent announced with their versions (HostFacts.step_kinds), kept beside
the facts so the scheduler reads them each pass without loading every host's facts

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28 23:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a plain ADD COLUMN (nullable): a host registered before announces nothing until its agent registers again
    op.add_column("hosts", sa.Column("step_kinds", sa.JSON(), nullable=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE hosts DROP COLUMN step_kinds")
    else:
        op.drop_column("hosts", "step_kinds")
