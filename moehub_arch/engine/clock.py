"""Clock domains: conversion between SM cycles and 1 ps ticks.

The SM clock period is kept in femtoseconds (e.g. 1.83 GHz -> 546448 fs) so that long runs do not
drift: cycle c starts at tick floor(c * period_fs / 1000). Every SM-side event happens on such an
edge; events from other blocks (links, memory) that wake an SM are rounded up to the next edge.
"""
from .jit import compiled

FS_PER_PS = 1000


def period_fs(frequency_hz):
    """Clock period in whole femtoseconds (rounded to nearest)."""
    return int(round(1e15 / frequency_hz))


@compiled
def cycle_edge(cycle, period_fs):
    """Tick at which SM cycle `cycle` begins."""
    return (cycle * period_fs) // FS_PER_PS


@compiled
def cycle_at_or_after(tick, period_fs):
    """Index of the first cycle that begins at or after `tick`."""
    return (tick * FS_PER_PS + period_fs - 1) // period_fs


@compiled
def align_up(tick, period_fs):
    """First cycle edge at or after `tick`."""
    return cycle_edge(cycle_at_or_after(tick, period_fs), period_fs)


@compiled
def bytes_ticks(nbytes, fs_per_byte):
    """Serialisation time of `nbytes` at a rate of one byte per `fs_per_byte` fs, rounded up."""
    return (nbytes * fs_per_byte + FS_PER_PS - 1) // FS_PER_PS
