# Recipes for working on Agency. `./run RECIPE` bootstraps .venv first; `just RECIPE` works
# once .venv exists (.venv/bin is put on PATH for every recipe).

set shell := ["bash", "-euo", "pipefail", "-c"]
export PATH := justfile_directory() + "/.venv/bin:" + env_var("PATH")

default:
    @just --list

# --- run -------------------------------------------------------------------

# bring the whole system up on its embedded defaults, in the foreground
up *ARGS:
    agency up {{ARGS}}

# only NATS and PostgreSQL, in the foreground
infra *ARGS:
    agency infra up {{ARGS}}

# a demo run against `just up` (--multi: a lead with two subagents)
demo *ARGS:
    agency demo {{ARGS}}

# is the system in the data directory running?
status *ARGS:
    agency infra status {{ARGS}}

# --- test ------------------------------------------------------------------

# the whole test suite against real NATS and PostgreSQL
test *ARGS:
    python -m pytest {{ARGS}}

# tests without the 3-node cluster
test-fast *ARGS:
    python -m pytest -m "not cluster" {{ARGS}}

# --- measure ---------------------------------------------------------------

# run a benchmark: just bench store (agent, replay, store; system: the whole system over
# HTTP against LangGraph: just bench system --parked 10000; http: one langgraph-sdk script
# against our /langgraph routes and against Aegra: just bench http)
bench NAME *ARGS:
    python -m bench.{{NAME}} {{ARGS}}

# --- check -----------------------------------------------------------------

lint:
    ruff check .
    ruff format --check .
    lint-imports --no-cache

typecheck:
    mypy contracts domain infra projections services

fmt:
    ruff format .
    ruff check --fix .

# write JSON Schemas and the AsyncAPI document of every subject
schema OUT="schema":
    agency contracts schema --out {{OUT}}

# --- faults ----------------------------------------------------------------

# random SIGKILLs of services, nats-server and PostgreSQL under load, then every promise
# checked: just chaos --threads 50 --kills 30 --latency 500-2000 --workers runtime=3 [--cluster]
chaos *ARGS:
    python -m tests.faults.chaos {{ARGS}}
