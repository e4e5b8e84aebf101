"""AG-UI (the Agent User Interaction Protocol) over a thread: `POST /agui/{agencyId}/{blueprint}`.

A `RunAgentInput` names the thread (created in the caller's tenant when absent) and carries
new messages or the answers to the run's interrupts; the answer is the run's AG-UI events as
Server-Sent Events, read from the thread's log. `docs/protocols.md` has the mapping.
"""
