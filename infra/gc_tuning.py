"""The garbage collector as a long-running Agency process runs it.

CPython collects its young generation every 700 allocations and its old one whenever it
grew by a quarter. A process holding thousands of threads' state then spends a fifth of
its time collecting, most of it walking objects that live as long as the process (modules,
classes, settings) in old-generation pauses of up to a quarter of a second
(`docs/performance.md`).
"""

from __future__ import annotations

import gc

# Allocations between young-generation collections, and the two generations' multipliers.
GC_THRESHOLD = (20_000, 20, 20)


def tune_gc() -> None:
    """What the process imported and set up so far is never collected again (it lives as
    long as the process), and collections come less often."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)
