#!/usr/bin/env bash
# install.sh PREFIX: builds libpagewise (release) and installs the C / C++ library:
#   PREFIX/lib/libpagewise.so.VERSION, with the links libpagewise.so.ABI (its soname) and
#   libpagewise.so; PREFIX/lib/libpagewise.a; PREFIX/include/pagewise.h and pagewise.hpp;
#   PREFIX/lib/pkgconfig/pagewise.pc.
# Then:  cc prog.c $(pkg-config --cflags --libs pagewise)
#        (PKG_CONFIG_PATH=PREFIX/lib/pkgconfig when PREFIX is not /usr or /usr/local)
# Environment: LIBDIR (default PREFIX/lib), DESTDIR (staged install, for packagers),
#   CARGO (default cargo), PROFILE (cargo's build profile, default release; the test suite
#   uses its own, ci), NO_BUILD=1 (install what target/PROFILE already has),
#   LIBSRC (the directory holding the built libraries; default the target's PROFILE/),
#   PC_RELOCATABLE=1 (the .pc finds the tree from its own place: ${pcfiledir}, for tarballs).
set -euo pipefail

usage() { sed -n '2,12s/^# \{0,1\}//p' "$0"; }
[ $# -eq 1 ] && [ "${1#-}" = "$1" ] || { usage >&2; exit 2; }

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
prefix=$1
libdir=${LIBDIR:-$prefix/lib}
dest=${DESTDIR:-}
cargo=${CARGO:-cargo}
profile=${PROFILE:-release}

version=$(sed -n 's/^version = "\([^"]*\)"$/\1/p' "$repo/Cargo.toml" | head -n1)
major=${version%%.*}
rest=${version#*.}
minor=${rest%%.*}
# The soname's version, as build.rs sets it: 0.MINOR below 1.0, else MAJOR.
if [ "$major" = 0 ]; then abi="0.$minor"; else abi=$major; fi

if [ "${NO_BUILD:-0}" != 1 ]; then
  "$cargo" build --profile "$profile" --manifest-path "$repo/Cargo.toml" -p pagewise-capi
fi
if [ -n "${LIBSRC:-}" ]; then
  out=$LIBSRC
else
  target=$("$cargo" metadata --no-deps --format-version 1 --manifest-path "$repo/Cargo.toml" |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
  out="$target/$profile"
fi
for f in libpagewise.so libpagewise.a; do
  [ -f "$out/$f" ] || { echo "install.sh: $out/$f is missing (build failed?)" >&2; exit 1; }
done

install -d "$dest$libdir/pkgconfig" "$dest$prefix/include"
install -m 0755 "$out/libpagewise.so" "$dest$libdir/libpagewise.so.$version"
ln -sfn "libpagewise.so.$version" "$dest$libdir/libpagewise.so.$abi"
ln -sfn "libpagewise.so.$abi" "$dest$libdir/libpagewise.so"
install -m 0644 "$out/libpagewise.a" "$dest$libdir/libpagewise.a"
install -m 0644 "$here/include/pagewise.h" "$here/include/pagewise.hpp" "$dest$prefix/include/"
# What Rust's standard library needs from the system when linking libpagewise.a
# (`rustc --print native-static-libs` on linux-gnu), less -lgcc_s: cc links the unwinder itself
# (libgcc_s for a dynamic program, libgcc_eh with -static, where -lgcc_s cannot be found).
libs_private="-lutil -lrt -lpthread -lm -ldl -lc"
pc_prefix=$prefix
pc_libdir=$libdir
if [ "${PC_RELOCATABLE:-0}" = 1 ]; then
  pc_prefix='${pcfiledir}/../..'
  pc_libdir='${prefix}/lib'
fi
sed -e "s|@PREFIX@|$pc_prefix|" -e "s|@LIBDIR@|$pc_libdir|" -e "s|@VERSION@|$version|" \
  -e "s|@LIBS_PRIVATE@|$libs_private|" "$here/pagewise.pc.in" >"$dest$libdir/pkgconfig/pagewise.pc"
chmod 0644 "$dest$libdir/pkgconfig/pagewise.pc"

if [ -z "$dest" ] && [ "$(id -u)" -eq 0 ] && command -v ldconfig >/dev/null &&
  case "$libdir" in /usr/*) true ;; *) false ;; esac; then
  ldconfig
fi
echo "install.sh: libpagewise $version installed under $dest$prefix (libdir $libdir)"
