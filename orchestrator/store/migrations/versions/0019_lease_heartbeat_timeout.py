"""controller_lease heartbeat_timeout_s: the heartbeat timeout of the controller holding the lease, so that its
readers (labctl hosts and queue, the web service) call a host down when the controller does; NULL until a
controller of this schema takes the lease (readers then use the default)

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-30 03:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("controller_lease") as batch:
        batch.add_column(sa.Column("heartbeat_timeout_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("controller_lease") as batch:
        batch.drop_column("heartbeat_timeout_s")
