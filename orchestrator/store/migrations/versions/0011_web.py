"""the lab as a service: API tokens of the web service; who submitted a run, its precondition cap and reruns;
the run list's index

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25 00:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("token_sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("created_by", sa.String(length=64), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=True),
        sa.Column("revoked_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_api_tokens")),
    )
    op.create_index(op.f("ix_api_tokens_token_sha256"), "api_tokens", ["token_sha256"], unique=True)
    with op.batch_alter_table("runs") as b:
        b.add_column(sa.Column("submitted_by", sa.String(length=64), nullable=False, server_default=""))
        b.add_column(sa.Column("max_rounds", sa.Integer(), nullable=True))
        b.add_column(sa.Column("rerun_count", sa.Integer(), nullable=False, server_default="0"))
        b.add_column(sa.Column("rerun_at", sa.Float(), nullable=True))
    # the web service's run list: newest first, keyset-paginated on (submitted_at, id)
    op.create_index("ix_runs_submitted_at_id", "runs", ["submitted_at", "id"])
    # its filters: steps of a run by state (done / total) and by OP mode (a key of the JSON cell; an expression
    # index, so it lives only here: the models cannot say it for both dialects)
    op.create_index("ix_steps_run_id_state", "steps", ["run_id", "state"])
    expr = ("(cell ->> 'op_mode')" if op.get_bind().dialect.name == "postgresql"
            else "CAST(JSON_EXTRACT(cell, '$.\"op_mode\"') AS VARCHAR)")
    op.create_index("ix_steps_run_id_op_mode", "steps", ["run_id", sa.text(expr)])


def downgrade() -> None:
    op.drop_index("ix_steps_run_id_op_mode", table_name="steps")
    op.drop_index("ix_steps_run_id_state", table_name="steps")
    op.drop_index("ix_runs_submitted_at_id", table_name="runs")
    with op.batch_alter_table("runs") as b:
        b.drop_column("rerun_at")
        b.drop_column("rerun_count")
        b.drop_column("max_rounds")
        b.drop_column("submitted_by")
    op.drop_index(op.f("ix_api_tokens_token_sha256"), table_name="api_tokens")
    op.drop_table("api_tokens")
