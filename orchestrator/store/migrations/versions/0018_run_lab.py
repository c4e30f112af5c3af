"""run lab: the lab a run was measured in, for runs imported from another lab's export or store (labctl import);
"" for the runs of this lab

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29 06:45:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # batch: SQLite rebuilds the table, PostgreSQL adds the column; the runs before it are this lab's ("")
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("lab", sa.String(64), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("lab")
