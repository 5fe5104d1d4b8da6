#!/usr/bin/env bash
# Builds tools/qemu_count/insn_count.c, a qemu TCG plugin that counts executed guest instructions, into
# ${CELLM_CACHE:-~/.cache/cellm}/qemu-plugin/libinsn_count.so and prints that path.
#
# The plugin is loaded by the installed (x86-64) qemu-aarch64, so it is built with the host gcc against the
# host's glib and against include/qemu/qemu-plugin.h of the very qemu source version that is installed. That
# header is taken from Debian's qemu source package (never committed): a private apt configuration under
# the cache folder (its own deb-src list, lists and archives; the system's apt setup is left alone) downloads
# the source package, and the header is extracted from the .orig tarball. Idempotent: each step is skipped
# when its output exists. Needs: qemu-user, gcc, pkg-config, libglib2.0-dev (installed here when missing).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cache="${CELLM_CACHE:-$HOME/.cache/cellm}"
src_pkg="$(dpkg-query -W -f '${source:Package}' qemu-user)"
src_ver="$(dpkg-query -W -f '${source:Version}' qemu-user)"   # without a binNMU suffix such as +b3
upstream="${src_ver#*:}"
upstream="${upstream%-*}"                                       # 1:7.2+dfsg-7+deb12u18 -> 7.2+dfsg
src_dir="$cache/qemu-src/${src_ver#*:}"                     # no epoch colon in the path
header="$src_dir/include/qemu/qemu-plugin.h"
out_dir="$cache/qemu-plugin"
out="$out_dir/libinsn_count.so"

log() { echo "build_qemu_plugin.sh: $*" >&2; }

# --- host build dependencies ----------------------------------------------------------------------------
if ! pkg-config --exists glib-2.0; then
  log "installing libglib2.0-dev (host glib headers)"
  apt-get install -y -qq libglib2.0-dev >&2
fi

# --- qemu-plugin.h from the installed qemu's source package -----------------------------------------------
if [[ ! -f "$header" ]]; then
  apt_dir="$cache/qemu-src/apt"
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial" "$src_dir"
  codename="$(. /etc/os-release && echo "$VERSION_CODENAME")"
  cat >"$apt_dir/sources.list" <<EOF
deb-src http://deb.debian.org/debian $codename main
deb-src http://deb.debian.org/debian $codename-updates main
deb-src http://deb.debian.org/debian-security $codename-security main
EOF
  apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
            -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir" -o "Dir::Cache::archives=$apt_dir/archives" -o APT::Sandbox::User=root)
  orig="$(find "$cache/qemu-src" -maxdepth 1 -name "${src_pkg}_${upstream}.orig.tar.*" -print -quit)"
  if [[ -z "$orig" ]]; then
    log "downloading the $src_pkg $src_ver source package (about 25 MB, once)"
    apt-get "${apt_opts[@]}" -qq update >&2
    (cd "$cache/qemu-src" && apt-get "${apt_opts[@]}" -qq source --download-only "$src_pkg=$src_ver" >&2)
    orig="$(find "$cache/qemu-src" -maxdepth 1 -name "${src_pkg}_${upstream}.orig.tar.*" -print -quit)"
    [[ -n "$orig" ]] || { log "no ${src_pkg}_${upstream}.orig.tar.* after apt-get source"; exit 1; }
  fi
  # Debian's patches (debian.tar.*) leave the plugin header alone in 7.2; refuse to guess if that changes.
  deb_tar="$(find "$cache/qemu-src" -maxdepth 1 -name "${src_pkg}_${src_ver#*:}.debian.tar.*" -print -quit)"
  if [[ -n "$deb_tar" ]] && tar -xOf "$deb_tar" --wildcards 'debian/patches/*' 2>/dev/null | grep -q 'qemu-plugin\.h'; then
    log "a Debian patch in $deb_tar touches qemu-plugin.h; apply it before building"
    exit 1
  fi
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  tar -xf "$orig" -C "$tmp" --wildcards '*/include/qemu/qemu-plugin.h'
  mkdir -p "$src_dir/include/qemu"
  mv "$(find "$tmp" -name qemu-plugin.h -print -quit)" "$header"
fi

# --- the plugin -------------------------------------------------------------------------------------------
plugin_src="$repo/tools/qemu_count/insn_count.c"
if [[ ! -f "$out" || "$plugin_src" -nt "$out" || "$header" -nt "$out" ]]; then
  mkdir -p "$out_dir"
  # shellcheck disable=SC2046  # pkg-config prints several flags
  gcc -O2 -Wall -Wextra -Wno-unused-parameter -shared -fPIC -o "$out.tmp" "$plugin_src" -I "$src_dir/include/qemu" \
    $(pkg-config --cflags glib-2.0)
  mv "$out.tmp" "$out"
fi
echo "$out"
