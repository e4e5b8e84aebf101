"""A limit of what may be in progress at once, measured from how long each thing took: the
admission door's (`admission.py`) and the run shares'."""

from __future__ import annotations

import math
from dataclasses import dataclass

# How fast the recent latency follows its samples; how fast the usual one follows a sample
# of a quiet process (under half its limit in flight), and of a busy one.
RECENT = 0.2
USUAL_QUIET = 0.05
USUAL_BUSY = 0.0002
# How much of each new estimate the limit takes.
SMOOTHING = 0.2


@dataclass
class MeasuredLimit:
    """How much may be in progress at once, from how long each took (a gradient): the limit
    follows the ratio of the usual time (learnt while quiet) to the recent one, plus room
    to grow, between `low` and `high`.

    The usual time is learnt from a quiet system (under half its limit in use and nothing
    refused of late); a busy one moves it only slowly (a different mix may be slower for
    good), so an overload that lasts does not become the usual and keeps the limit down."""

    low: int
    high: int
    tolerance: float
    limit: float
    recent: float = 0.0
    usual: float = 0.0

    def observe(self, took: float, *, quiet: bool, in_use: int) -> None:
        if not self.recent:
            self.recent = self.usual = took
            return
        self.recent += RECENT * (took - self.recent)
        learn = USUAL_QUIET if quiet or took < self.usual else USUAL_BUSY
        self.usual += learn * (took - self.usual)
        gradient = max(0.5, min(1.0, self.tolerance * self.usual / self.recent))
        estimate = self.limit * gradient + math.sqrt(self.limit)
        if estimate > self.limit and in_use < self.limit / 2:
            return  # not using what it has: no evidence that more would be served
        limit = self.limit + SMOOTHING * (estimate - self.limit)
        self.limit = max(float(self.low), min(float(self.high), limit))

    def retry_after(self, held: int, share: float) -> int:
        """Seconds until a tenant holding `held` is likely back under `share`: what it
        holds beyond the share done, at the recent time, its share at a time."""
        whole = max(1, math.floor(share))
        rounds = math.ceil((held - whole + 1) / whole)
        return max(1, math.ceil(rounds * (self.recent or 1.0)))
