"""Logging and tracing set-up shared by every process."""
