# Helpers every bench script shares; sourced right after `set -euo pipefail`:
#   . "$(dirname "$0")/lib.sh"
# BENCH_NAME is the script's name, for messages.
BENCH_NAME=bench/$(basename "$0")

# say TEXT: a line on stdout and appended to the report "$md".
say() { printf '%s\n' "$*" | tee -a "$md"; }
# log TEXT: a section heading on stderr.
log() { printf '\n== %s\n' "$*" >&2; }
# die TEXT: the error, naming the script, and exit 1.
die() { echo "$BENCH_NAME: error: $*" >&2; exit 1; }
