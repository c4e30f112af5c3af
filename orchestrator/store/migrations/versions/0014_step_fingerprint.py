"""step fingerprint: what a step ran without the device's path (orchestrator.store.fingerprint), so that a history
series keeps to one workload per cell; computed for the steps stored before it

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28 15:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from orchestrator.store.fingerprint import fingerprint

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

BATCH = 2000


def upgrade() -> None:
    # a plain ADD COLUMN (SQLite takes it with a constant default): a batch copy of the table would drop 0011's
    # expression index on steps
    op.add_column("steps", sa.Column("fingerprint", sa.String(16), nullable=False, server_default=""))
    bind = op.get_bind()
    steps = sa.table("steps", sa.column("id", sa.String), sa.column("kind", sa.String),
                     sa.column("job_text", sa.Text), sa.column("fingerprint", sa.String))
    last = ""
    while True:   # in batches by id: a store of 100,000 steps is never read whole
        rows = bind.execute(sa.select(steps.c.id, steps.c.kind, steps.c.job_text).where(steps.c.id > last)
                            .order_by(steps.c.id).limit(BATCH)).all()
        if not rows:
            break
        updates = [{"sid": sid, "fp": fp} for sid, kind, text in rows
                   if (fp := fingerprint(str(kind or "measure"), str(text or "")))]
        if updates:
            bind.execute(steps.update().where(steps.c.id == sa.bindparam("sid"))
                         .values(fingerprint=sa.bindparam("fp")), updates)
        last = rows[-1][0]


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE steps DROP COLUMN fingerprint")   # SQLite >= 3.35, keeping the table's indexes
    else:
        op.drop_column("steps", "fingerprint")
