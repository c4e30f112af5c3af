"""The bounds of what crosses the wire, in one place: every string, list, mapping and number of every message
model carries one (``tests/unit/test_bounds.py`` walks every model of the protocol and fails on a field without
one, and checks docs/security.md's table of bounds against the constants here).

Two kinds of strings: an identifier or a path (a DUT's serial, a device path, an id) is refused when it is too
long, since a cut one could name something else; a free-text fact (a CPU model, an OS name, a BIOS string) is
cut at :data:`FACT_TEXT` characters, since it only describes.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field

MAX_EPOCH = 4_102_444_800.0       # 2100-01-01 UTC: the latest time a message may carry (1e300 broke time.localtime)
FACT_TEXT = 256                   # a free-text host or device fact, cut to this many characters
FACT_ID = 128                     # a device's serial, model name part, kernel name; a controller's slot
FACT_PATH = 512                   # a device path or by-id link
MAX_BLOCK_DEVICES = 1024          # of one host's facts
MAX_LINKS = 32                    # by-id links of one block device
MAX_OBSERVED = 64                 # mount points, holders, signatures of one observed DUT
FACTS_MAX_BYTES = 1 << 20         # a host's facts as JSON: refused over this (the agent at its start)
PROVENANCE_MAX_BYTES = 64 << 10   # what a result row stores of its host's facts, as JSON
MAX_BYTES_COUNT = 1 << 62         # a byte or I/O count (sizes, totals)
MAX_FIGURE = 1e15                 # a live figure (IOPS, latency ns)
MAX_SECONDS = 1e9                 # a duration in seconds (about 31 years)
MAX_COUNT = 1 << 20               # a small count (threads, depth, cores, sockets, MTU, a round)


def _cut(limit: int) -> Any:
    def cut(v: object) -> object:
        return v[:limit] if isinstance(v, str) else v
    return BeforeValidator(cut)


#: free text, cut at :data:`FACT_TEXT`
FactText = Annotated[str, _cut(FACT_TEXT), Field(max_length=FACT_TEXT)]
#: an identifier-like fact (serial, slot, driver name), refused over :data:`FACT_ID`
FactId = Annotated[str, Field(max_length=FACT_ID)]
#: a path or link, refused over :data:`FACT_PATH`
FactPath = Annotated[str, Field(max_length=FACT_PATH)]
#: epoch seconds, finite and within [0, MAX_EPOCH]
Epoch = Annotated[float, Field(ge=0, le=MAX_EPOCH, allow_inf_nan=False)]
ByteCount = Annotated[int, Field(ge=0, le=MAX_BYTES_COUNT)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Figure = Annotated[float, Field(ge=0, le=MAX_FIGURE, allow_inf_nan=False)]
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)]
