#!/usr/bin/env bash
# Print the path of a working CPython VERSION interpreter on this machine, or nothing (exit 1):
# infra/ci/find-python.sh VERSION. Looks at $PYTHON, then pythonVERSION on PATH, then the
# newest pyenv build (${PYENV_ROOT:-~/.pyenv}/versions/VERSION.*), then the prefix
# infra/ci/python.sh builds into (/opt/agency-pythonVERSION).
set -uo pipefail

want=${1:?usage: find-python.sh VERSION}
modules="ssl, sqlite3, ctypes, venv"

works() {
  [ -n "$1" ] && "$1" -c "import sys, $modules; assert sys.version.startswith('$want.')" 2>/dev/null
}

candidates=("${PYTHON:-}" "$(command -v "python$want" 2>/dev/null)")
pyenv_root=${PYENV_ROOT:-$HOME/.pyenv}
while read -r dir; do
  candidates+=("$dir/bin/python$want")
done < <(ls -d "$pyenv_root/versions/$want".* 2>/dev/null | sort -rV)
candidates+=("/opt/agency-python$want/bin/python$want")

for python in "${candidates[@]}"; do
  if works "$python"; then
    echo "$python"
    exit 0
  fi
done
exit 1
