"""The registry: tenants and their API keys, agencies, blueprints, the thread registry."""
