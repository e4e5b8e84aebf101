"""Run webhooks: a signed POST when a run that named one ends."""
