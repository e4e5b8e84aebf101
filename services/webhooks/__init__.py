"""Webhooks: agencies' subscriptions delivered per Standard Webhooks, and runs' own
webhooks (a signed POST when a run that named one ends)."""
