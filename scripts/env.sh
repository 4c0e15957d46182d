# Source this to use the project's tools: `. scripts/env.sh`
_sf_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$_sf_root/.venv/bin:$(cat "$_sf_root/.venv/.pulumi-bin" 2>/dev/null || echo /nonexistent):$PATH"
export PULUMI_SKIP_UPDATE_CHECK=true
export PULUMI_CONFIG_PASSPHRASE="${PULUMI_CONFIG_PASSPHRASE:-servefleet-sim}"
export PULUMI_BACKEND_URL="${PULUMI_BACKEND_URL:-file://$_sf_root/.pulumi-state}"
mkdir -p "$_sf_root/.pulumi-state"
unset _sf_root
