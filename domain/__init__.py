"""The domain: pure folds and decisions over the log that more than one service uses.

Nothing here reads or writes the log, a file or the environment, or knows a tool by name;
the modules import `contracts` (the events, the recorded events, the command rejection)
and each other. What needs the infrastructure, such as opening sealed values, the caller
passes in (`docs/architecture.md`, "Layers")."""
