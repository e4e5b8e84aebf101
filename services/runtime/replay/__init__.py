"""Re-execution of threads and workflows, straight from the event log: the runtime's own
loop over an in-memory copy of the log, never the live one.

The runtime service answers re-execution requests on the bus with it (`responder.py`,
for the API's console); `agency replay --re-execute` and `agency workflow replay
--re-execute` run it in their own process. Workflow replay lives here too: it re-executes
the members' threads with the same code. Nothing here reads a read model: every view is
built from JetStream, so it works with PostgreSQL down.
"""
