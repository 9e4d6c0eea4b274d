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

# ram_device MB: a fresh ext4 on a loop device whose backing file (MB MiB) is in a tmpfs this
# mounts; sets DATA to its mount point. Unmounts, detaches the loop device and removes the
# tmpfs on any exit (an EXIT trap: a script using this sets no other). Needs root.
ram_device() {
    [ "$(id -u)" = 0 ] || die "DEVICE=ram needs root (mount, losetup)"
    ram=$(mktemp -d /var/tmp/pagewise-ram.XXXXXX)
    loopdev=
    ram_cleanup() {
        mountpoint -q "$ram/fs" && umount "$ram/fs"
        [ -n "$loopdev" ] && losetup -d "$loopdev"
        mountpoint -q "$ram/tmpfs" && umount "$ram/tmpfs"
        rm -rf "$ram"
    }
    trap ram_cleanup EXIT
    mkdir -p "$ram/tmpfs" "$ram/fs"
    mount -t tmpfs -o "size=${1}m" pagewise-bench "$ram/tmpfs"
    truncate -s "${1}M" "$ram/tmpfs/disk.img"
    loopdev=$(losetup --find --show "$ram/tmpfs/disk.img")
    mkfs.ext4 -q -F "$loopdev"
    mount "$loopdev" "$ram/fs"
    DATA=$ram/fs
}

# wheel_venv VENV PROFILE PACKAGE...: a virtualenv at VENV (made with $PYTHON when missing)
# with the PACKAGEs from PyPI and the pagewise wheel built from this checkout (maturin,
# cargo profile PROFILE) installed into it.
wheel_venv() {
    local venv=$1 profile=$2
    shift 2
    if [ ! -x "$venv/bin/python" ]; then
        log "virtualenv $venv"
        "${PYTHON:-python3}" -m venv "$venv" || die "${PYTHON:-python3} -m venv failed"
    fi
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "maturin>=1.5,<2" "$@" \
        || die "pip install maturin $* failed"
    log "maturin build --profile $profile"
    rm -rf "$venv/wheels"
    "$venv/bin/maturin" build --profile "$profile" -q -m "$REPO/python/Cargo.toml" -o "$venv/wheels" \
        || die "maturin build failed"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps \
        "$venv"/wheels/*.whl || die "pip install of the wheel failed"
}
