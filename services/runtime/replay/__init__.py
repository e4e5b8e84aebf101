"""Re-execution of threads, straight from the event log: the runtime's own loop over an
in-memory copy of the log, never the live one.

The runtime service answers re-execution requests on the bus with it (`responder.py`,
for the API's console); `agency replay --re-execute` and `agency workflow replay
--re-execute` run it in their own process (workflow replay,
`services/workflows/cli/replay.py`, re-executes the members' threads with it). Nothing here
reads a read model: every view is built from JetStream, so it works with PostgreSQL down.
"""
