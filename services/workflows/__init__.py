"""Workflows: agents working together on a shared channel."""
