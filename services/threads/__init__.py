"""Threads read from the log: cached folded state, reads, subagent trees, the middleware view,
and forks."""
