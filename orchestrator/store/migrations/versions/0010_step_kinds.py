"""step kinds: kind-neutral result rows (kind, tool, tool_version, throughput and its unit); fio's figures
and fio_version become nullable (network and application results have none of their own)

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24 21:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

FIO_FIGURES = ("read_iops", "write_iops", "iops", "read_bw_bytes", "write_bw_bytes", "bw_bytes")
NET_STEPS = "step_id IN (SELECT id FROM steps WHERE kind = 'net')"


def upgrade() -> None:
    with op.batch_alter_table("results") as b:
        b.add_column(sa.Column("kind", sa.String(16), nullable=True))
        b.add_column(sa.Column("tool", sa.String(32), nullable=True))
        b.add_column(sa.Column("tool_version", sa.String(128), nullable=True))
        b.add_column(sa.Column("throughput", sa.Float(), nullable=True))
        b.add_column(sa.Column("throughput_unit", sa.String(16), nullable=True))
        b.alter_column("fio_version", existing_type=sa.String(32), nullable=True)
        for name in FIO_FIGURES:
            b.alter_column(name, existing_type=sa.Float(), nullable=True)
    # network results carried their tool (fio | iscsi) in fio_version
    op.execute(f"UPDATE results SET kind = 'net', tool = fio_version, tool_version = '', "
               f"throughput = bw_bytes * 8 / 1e9, throughput_unit = 'Gbps', fio_version = NULL WHERE {NET_STEPS}")
    op.execute("UPDATE results SET kind = 'fio', tool = 'fio', tool_version = fio_version, throughput = iops, "
               "throughput_unit = 'IOPS' WHERE kind IS NULL")
    with op.batch_alter_table("results") as b:
        for name, type_ in (("kind", sa.String(16)), ("tool", sa.String(32)), ("tool_version", sa.String(128)),
                            ("throughput_unit", sa.String(16))):
            b.alter_column(name, existing_type=type_, nullable=False)


def downgrade() -> None:
    # back to fio's shape: a network result's tool in fio_version again, missing figures 0
    op.execute("UPDATE results SET fio_version = COALESCE(fio_version, tool)")
    for name in FIO_FIGURES:
        op.execute(f"UPDATE results SET {name} = 0 WHERE {name} IS NULL")
    with op.batch_alter_table("results") as b:
        for name in FIO_FIGURES:
            b.alter_column(name, existing_type=sa.Float(), nullable=False)
        b.alter_column("fio_version", existing_type=sa.String(32), nullable=False)
        for name in ("throughput_unit", "throughput", "tool_version", "tool", "kind"):
            b.drop_column(name)
