# Source this to use the project's tools: `. scripts/env.sh`
# Puts .venv/bin first on PATH (servefleet, pytest, ruff…), then the Pulumi CLI and a local
# file backend (see scripts/pulumi-env): nothing talks to Pulumi Cloud.
_sf_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case ":$PATH:" in
  *":$_sf_root/.venv/bin:"*) ;;
  *) export PATH="$_sf_root/.venv/bin:$PATH" ;;
esac
export PULUMI_PYTHON_CMD="$_sf_root/.venv/bin/python"
. "$_sf_root/scripts/pulumi-env"
unset _sf_root
