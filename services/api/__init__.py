"""The HTTP API: queries from read models, commands onto the bus, live streams."""
