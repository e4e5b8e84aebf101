"""The JetStream layer: streams, the event store, commands and dead letters."""
