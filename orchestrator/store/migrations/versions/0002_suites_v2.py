"""suites v2: step kinds, precondition rounds, device groups, steady-state records

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21 10:40:00
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _steps_0001_without_unique() -> sa.Table:
    """The 0001 steps table minus its unnamed (run_id, seq) unique constraint: SQLite cannot drop an
    unnamed constraint, so the batch copy starts from this definition instead of reflection."""
    return sa.Table(
        "steps", sa.MetaData(),
        sa.Column("id", sa.String(length=48), nullable=False),
        sa.Column("run_id", sa.String(length=32), sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("workload", sa.JSON(), nullable=False),
        sa.Column("job_text", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.Index("ix_steps_state", "state"),
    )


def upgrade() -> None:
    op.create_table(
        "preconditions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=160), nullable=False),
        sa.Column("criteria", sa.JSON(), nullable=False),
        sa.Column("rounds", sa.JSON(), nullable=False),
        sa.Column("steady", sa.Boolean(), nullable=True),
        sa.Column("reached_round", sa.Integer(), nullable=True),
        sa.Column("verdict", sa.Text(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_preconditions_run_id_runs"),
        sa.PrimaryKeyConstraint("id", name="pk_preconditions"),
        sa.UniqueConstraint("run_id", "seq", name="uq_preconditions_run_id"),
    )
    op.create_index("ix_preconditions_run_id", "preconditions", ["run_id"])

    with op.batch_alter_table("runs") as b:
        b.add_column(sa.Column("devices", sa.JSON(), nullable=False, server_default="[]"))
        b.add_column(sa.Column("scale", sa.Float(), nullable=True))
    bind = op.get_bind()
    runs = sa.table("runs", sa.column("id", sa.String()), sa.column("device", sa.String()),
                    sa.column("devices", sa.JSON()))
    for run_id, device in bind.execute(sa.select(runs.c.id, runs.c.device)).all():
        bind.execute(runs.update().where(runs.c.id == run_id).values(devices=json.loads(json.dumps([device]))))

    with op.batch_alter_table("results") as b:
        b.add_column(sa.Column("per_device", sa.JSON(), nullable=True))
        b.add_column(sa.Column("series", sa.JSON(), nullable=True))
        b.alter_column("attempt_id", existing_type=sa.String(48), type_=sa.String(72), existing_nullable=False)
        b.alter_column("step_id", existing_type=sa.String(48), type_=sa.String(64), existing_nullable=False)
    with op.batch_alter_table("artifacts") as b:
        b.alter_column("attempt_id", existing_type=sa.String(48), type_=sa.String(72), existing_nullable=False)
    with op.batch_alter_table("attempts") as b:
        b.alter_column("id", existing_type=sa.String(48), type_=sa.String(72), existing_nullable=False)
        b.alter_column("step_id", existing_type=sa.String(48), type_=sa.String(64), existing_nullable=False)

    sqlite = bind.dialect.name == "sqlite"
    batch = {"copy_from": _steps_0001_without_unique(), "recreate": "always"} if sqlite else {}
    old_unique = [] if sqlite else [
        uc["name"] for uc in sa.inspect(bind).get_unique_constraints("steps")
        if sorted(uc["column_names"]) == ["run_id", "seq"] and uc["name"]]
    with op.batch_alter_table("steps", **batch) as b:  # type: ignore[arg-type]
        b.add_column(sa.Column("round", sa.Integer(), nullable=False, server_default="0"))
        b.add_column(sa.Column("kind", sa.String(length=16), nullable=False, server_default="measure"))
        b.add_column(sa.Column("cell", sa.JSON(), nullable=False, server_default="{}"))
        b.add_column(sa.Column("note", sa.Text(), nullable=False, server_default=""))
        b.alter_column("id", existing_type=sa.String(48), type_=sa.String(64), existing_nullable=False)
        b.alter_column("name", existing_type=sa.String(128), type_=sa.String(160), existing_nullable=False)
        b.alter_column("workload", existing_type=sa.JSON(), nullable=True)
        for name in old_unique:
            b.drop_constraint(name, type_="unique")
        b.create_unique_constraint("uq_steps_run_id_seq_round", ["run_id", "seq", "round"])


def downgrade() -> None:
    raise NotImplementedError("0002 cannot be downgraded: precondition rounds and device groups would be lost")
