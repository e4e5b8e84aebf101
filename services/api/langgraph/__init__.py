"""LangGraph Agent Server compatibility: the routes the official `langgraph-sdk` client calls,
mounted at `/langgraph` and mapped onto our blueprints, threads and runs.

`get_client(url=f"{base}/langgraph", api_key=key)` works unchanged: the tenant's API key
arrives as `x-api-key`. The wire format here is LangGraph's own (snake_case), an explicit
exception to the API's camelCase, confined to this prefix. `docs/langgraph.md` has the
mapping and the list of what does not map.
"""
