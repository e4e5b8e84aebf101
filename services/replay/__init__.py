"""Re-execution of threads and workflows, straight from the event log.

Nothing here reads a read model: every view is built from JetStream, so it works with
PostgreSQL down, and re-execution runs the current runtime code against an in-memory
copy of the log, never the live one.
"""
