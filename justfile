# Recipes for working on Agency. `./run RECIPE` bootstraps .venv first; `just RECIPE` works
# once .venv exists (.venv/bin is put on PATH for every recipe).

set shell := ["bash", "-euo", "pipefail", "-c"]
export PATH := justfile_directory() + "/.venv/bin:" + env_var("PATH")

default:
    @just --list

# --- run -------------------------------------------------------------------

# bring the whole system up on its embedded defaults, in the foreground (`./run up` and
# `./run infra` start `agency` without `just`, which would call a Ctrl-C its own error)
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

# retake the console's screenshots in docs/console/ (the browser tests, which otherwise
# take them into a temporary directory)
screenshots *ARGS:
    AGENCY_SCREENSHOTS=1 python -m pytest tests/console -m "not cluster" {{ARGS}}

# The suite's schemathesis run bounds its examples; this one takes schemathesis's defaults.
# schemathesis against `agency up`: every check and phase, default settings (long)
schemathesis *ARGS:
    AGENCY_SCHEMATHESIS_FULL=1 python -m pytest -p no:cacheprovider tests/api/test_openapi_conformance.py {{ARGS}}

# the core of the suite (contracts, store, the loop, API, CLI, providers) in a few minutes,
# run on every supported Python besides the main one
core_tests := "tests/contracts tests/store tests/runtime/test_loop.py tests/api tests/llm --ignore=tests/api/test_openapi_conformance.py"

# The interpreter is $PYTHON, else pythonVERSION on PATH, else one built from Debian's source
# into /opt/agency-pythonVERSION by infra/ci/python.sh.
# the core tests (ARGS: more pytest options) on another Python in .venv-VERSION: just test-python 3.13
test-python VERSION *ARGS:
    #!/usr/bin/env bash
    set -euo pipefail
    if ! python=$(infra/ci/find-python.sh {{VERSION}}); then
      infra/ci/python.sh {{VERSION}}
      python=/opt/agency-python{{VERSION}}/bin/python{{VERSION}}
    fi
    venv=.venv-{{VERSION}}
    want=$(sha256sum pyproject.toml | cut -d' ' -f1)
    if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.installed" 2>/dev/null)" != "$want" ]; then
      echo "installing into $venv with $("$python" --version)..." >&2
      "$python" -m venv --clear "$venv"
      "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
      "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[dev]'
      echo "$want" > "$venv/.installed"
    fi
    export PATH="$PWD/$venv/bin:$PATH"
    exec python -m pytest {{core_tests}} {{ARGS}}

# The A2A TCK is vendored at a pinned commit in tests/protocols/a2a/vendor/a2a-tck (ORIGIN.md names
# it); its environment (PyPI packages only) is .tck/venv, its reports go to .tck/reports.
# AGENCY_A2A_TCK names another copy of the TCK to run instead. It fails on any failure
# docs/protocols.md does not explain.
# the A2A TCK's mandatory and capability tests against the test system (minutes)
tck *ARGS:
    #!/usr/bin/env bash
    set -euo pipefail
    tck=${AGENCY_A2A_TCK:-$PWD/tests/protocols/a2a/vendor/a2a-tck}
    venv=.tck/venv
    want=$(sha256sum "$tck/pyproject.toml" | cut -d' ' -f1)
    if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.installed" 2>/dev/null)" != "$want" ]; then
      echo "installing the TCK's dependencies into $venv..." >&2
      python -m venv --clear "$venv"
      python -c 'import sys, tomllib; print(*tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"], sep="\n")' \
        "$tck/pyproject.toml" > "$venv/requirements.txt"
      "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$venv/requirements.txt"
      echo "$want" > "$venv/.installed"
    fi
    AGENCY_A2A_TCK=$tck AGENCY_A2A_TCK_PYTHON=$PWD/$venv/bin/python AGENCY_A2A_TCK_REPORTS=$PWD/.tck/reports \
      timeout 3000 python -m pytest -p no:cacheprovider -s tests/protocols/a2a/tck.py {{ARGS}}

# the deployment's tests: the image built and run with podman, the compose file brought up
# with podman-compose, the Helm chart rendered and validated (slow: not part of `just test`)
test-deploy *ARGS:
    python -m pip install --quiet --disable-pip-version-check -e '.[dev,deploy]'
    timeout 3000 python -m pytest -p no:cacheprovider deploy/tests {{ARGS}}

# --- ship ------------------------------------------------------------------

# build the OCI image with podman: just image [TAG] (default localhost/agency:VERSION)
image *ARGS:
    nice -n 19 deploy/image/build.sh {{ARGS}}

# --- measure ---------------------------------------------------------------

# run a benchmark: just bench store (agent, replay, store; system: the whole system over
# HTTP against LangGraph: just bench system --parked 10000; http: one langgraph-sdk script
# against our /langgraph routes and against Aegra: just bench http; blueprints: the
# 10,000th blueprint save against the first; encryption: agent sequential and system resume
# sealed against AGENCY_ENCRYPTION=off; partitions: appends on 3 partitions of the 3-node
# cluster against 1)
bench NAME *ARGS:
    python -m bench.{{NAME}} {{ARGS}}

# --- check -----------------------------------------------------------------

lint:
    ruff check .
    ruff format --check .
    lint-imports --no-cache

typecheck:
    mypy -p agency

fmt:
    ruff format .
    ruff check --fix .

# write JSON Schemas and the AsyncAPI document of every subject
schema OUT="schema":
    agency contracts schema --out {{OUT}}

# --- faults ----------------------------------------------------------------

# random SIGKILLs of services, nats-server and PostgreSQL under load, then every promise
# checked: just chaos --threads 50 --kills 30 --latency 500-2000 --workers runtime=3 [--cluster]
# (--down 3-6: killed parts stay down that long; --busy: a busy process on every core;
# --partitions 3: the events log in 3 partitions)
chaos *ARGS:
    python -m tests.faults.chaos {{ARGS}}
