"""Helpers for tests that build synthetic fio reports."""

from __future__ import annotations

# fio's latency histogram (stat.c plat_val_to_idx / plat_idx_to_val, FIO_IO_U_PLAT_BITS = 6)
_BITS, _VAL = 6, 64


def bin_value(ns: int) -> int:
    """The json+ bin key fio files a latency of ``ns`` under."""
    msb = ns.bit_length() - 1 if ns else 0
    if msb <= _BITS:
        return ns
    error_bits = msb - _BITS
    idx = ((error_bits + 1) << _BITS) + ((_VAL - 1) & (ns >> error_bits))
    if idx < (_VAL << 1):
        return idx
    eb = (idx >> _BITS) - 1
    base = 1 << (eb + _BITS)
    return int(base + ((idx % _VAL) + 0.5) * (1 << eb))
