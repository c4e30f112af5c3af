"""trust: the controller lease (fencing token), clock skew and protocol compatibility per host

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24 12:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "controller_lease",
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("holder", sa.String(length=128), nullable=False),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.Column("acquired_at", sa.Float(), nullable=False),
        sa.Column("renewed_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_controller_lease")),
    )
    with op.batch_alter_table("hosts") as b:
        b.add_column(sa.Column("clock_skew_s", sa.Float(), nullable=True))
        b.add_column(sa.Column("incompatible", sa.Text(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("hosts") as b:
        b.drop_column("incompatible")
        b.drop_column("clock_skew_s")
    op.drop_table("controller_lease")
