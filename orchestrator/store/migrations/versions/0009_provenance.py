"""provenance: results keep their merged latency histogram (fio json+ lat_ns bins)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24 18:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # nullable: results stored before this revision (and network results) have no histogram
    with op.batch_alter_table("results") as b:
        b.add_column(sa.Column("lat_hist", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("results") as b:
        b.drop_column("lat_hist")
