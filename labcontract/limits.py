"""Bounds that both the wire and the command line state, in a module light enough for ``labctl``'s start (no pydantic,
unlike :mod:`labcontract.bounds`, the bounds of the message models): its
options name them (``--priority`` within ±MAX_PRIORITY, ``--repeat`` up to MAX_REPEAT) before any message model is
loaded. :mod:`labcontract.protocol` and :mod:`labcontract.suite` enforce them."""

from __future__ import annotations

MAX_PRIORITY = 1_000_000       # a run's priority is within +-this (labctl's options say so before sending)
MAX_REPEAT = 50                # runs of one cell a suite (or --repeat) may ask for
