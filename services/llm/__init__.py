"""Model providers: the `Provider` port, its OpenAI-compatible adapter, and the router that
picks a provider by the model's prefix (`services/llm/router.py`, `docs/models.md`).

The fake LLM server for tests and the offline demo lives in `services.llm.fake_server`,
imported on demand so production code does not load it. Each module is imported by its own
name: the package re-exports nothing.
"""
