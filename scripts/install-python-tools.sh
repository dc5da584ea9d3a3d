#!/usr/bin/env bash
# Installs the pinned Python tools (scripts/python-tools.txt) into the project's virtual
# environment (VENV, made by install-torch.sh). A stamp holding the list's checksum makes a
# second run free and a changed list reinstall.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${VENV:-$root/.venv}"
list="$root/scripts/python-tools.txt"
stamp="$venv/.dtrain-python-tools-$(sha256sum "$list" | cut -c1-16)"
[ -f "$stamp" ] && exit 0
echo "install-python-tools: $(grep -v '^#' "$list" | tr '\n' ' ')into $venv" >&2
"$venv/bin/python" -m pip --disable-pip-version-check -q install -r "$list"
touch "$stamp"
