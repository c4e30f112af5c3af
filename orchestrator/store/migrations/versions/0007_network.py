"""network tests: a run's topology, a step's host, per-path results, the groups of steps started together

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-21 18:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as b:
        b.add_column(sa.Column("topology", sa.JSON(), nullable=True))
    with op.batch_alter_table("steps") as b:
        b.add_column(sa.Column("host", sa.String(length=128), nullable=False, server_default=""))
        b.drop_constraint("uq_steps_run_id_seq_round", type_="unique")
        b.create_unique_constraint("uq_steps_run_id_seq_round_host", ["run_id", "seq", "round", "host"])
    with op.batch_alter_table("results") as b:
        b.add_column(sa.Column("per_path", sa.JSON(), nullable=True))
    op.create_table(
        "net_groups",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=160), nullable=False),
        sa.Column("cell", sa.JSON(), nullable=False),
        sa.Column("hosts", sa.JSON(), nullable=False),
        sa.Column("starts", sa.JSON(), nullable=False),
        sa.Column("skew_ms", sa.Float(), nullable=True),
        sa.Column("window_start", sa.Float(), nullable=True),
        sa.Column("window_end", sa.Float(), nullable=True),
        sa.Column("total", sa.JSON(), nullable=False),
        sa.Column("per_path", sa.JSON(), nullable=False),
        sa.Column("per_host", sa.JSON(), nullable=False),
        sa.Column("failures", sa.JSON(), nullable=False),
        sa.Column("complete", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_net_groups_run_id_runs"),
        sa.PrimaryKeyConstraint("id", name="pk_net_groups"),
        sa.UniqueConstraint("run_id", "seq", name="uq_net_groups_run_id_seq"),
    )


def downgrade() -> None:
    op.drop_table("net_groups")
    with op.batch_alter_table("results") as b:
        b.drop_column("per_path")
    with op.batch_alter_table("steps") as b:
        b.drop_constraint("uq_steps_run_id_seq_round_host", type_="unique")
        b.create_unique_constraint("uq_steps_run_id_seq_round", ["run_id", "seq", "round"])
        b.drop_column("host")
    with op.batch_alter_table("runs") as b:
        b.drop_column("topology")
