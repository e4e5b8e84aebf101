"""Where this process last left each thread settled: a drive that ran until the thread
waits, and the stream position it waited at.

A trigger event asks for a drive from a state that includes it. When a drive here began
after that event was stored and ended with the thread waiting, the trigger has nothing
left to ask: the invoke and the approval are driven at once by the worker that stored
them (`Drives.soon`), so their triggers, which arrive while that drive
runs, would otherwise take the thread's lease and read it again only to find it waiting.

Only a drive that returned counts; one that failed, was cancelled or lost its lease
leaves no mark, and the trigger drives as before. Another worker's appends come after
the mark, so their own triggers are never skipped here. Bounded: the least recently
settled threads are forgotten first, and a forgotten thread is driven as before.
"""

from __future__ import annotations

from collections import OrderedDict

DEFAULT_KEPT = 10_000


class SettledThreads:
    def __init__(self, kept: int = DEFAULT_KEPT) -> None:
        self._kept = kept
        self._at: OrderedDict[tuple[str, str], int] = OrderedDict()

    def mark(self, tenant: str, thread_id: str, stream_seq: int) -> None:
        """A drive here ended with the thread waiting at `stream_seq`."""
        key = (tenant, thread_id)
        self._at[key] = max(stream_seq, self._at.get(key, 0))
        self._at.move_to_end(key)
        while len(self._at) > self._kept:
            self._at.popitem(last=False)

    def covers(self, tenant: str, thread_id: str, stream_seq: int) -> bool:
        """Whether a drive here settled the thread at or after the event at `stream_seq`."""
        return stream_seq > 0 and self._at.get((tenant, thread_id), 0) >= stream_seq
