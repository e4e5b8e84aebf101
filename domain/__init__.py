"""The domain: pure folds and decisions over the log that more than one service uses.

Nothing here reads or writes the log; the modules import `contracts`, `infra`'s record
types, its command rejection and sealing, and each other (`docs/architecture.md`,
"Layers")."""
