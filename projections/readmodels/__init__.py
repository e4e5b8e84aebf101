"""The read models the query API serves."""
