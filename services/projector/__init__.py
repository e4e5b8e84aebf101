"""The projector: keeps every read model up to date with the log."""
