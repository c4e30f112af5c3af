"""Reading rich tables as labctl prints them off a terminal (200 columns): a cell wider than its column wraps
onto the next lines, and where it wraps depends on the other cells (a machine's CPU name, say)."""

from __future__ import annotations


def column_text(table: str, index: int = -1) -> str:
    """The text of one column (``index`` as in a list of the row's cells, -1: the last), each row's wrapped
    lines joined with spaces, the rows too."""
    cells = [line.split("│")[1:-1][index].strip() for line in table.splitlines() if line.count("│") >= 2]
    return " ".join(c for c in cells if c)
