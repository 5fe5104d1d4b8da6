#!/usr/bin/env bash
# Pack what a Release build needs to run on the lent GPU machine into .gpu-carry/ (repo root), for the device
# tool's `carry` list: [".gl", ".gpu-carry"]. The GPU machine has none of this machine's Debian packages and
# takes at most 64 MiB of files per run (working tree + carried paths), so:
#   .gpu-carry/bin/cellm-host, cellm-make-model      stripped copies (and grammar_mask_bench when built)
#   .gpu-carry/bin/plugins/                          every plugin of the build (cellm-*.so, found next to
#                                                    cellm-host; the vulkan one is cellm-vulkan.so), stripped,
#                                                    and anything else in that folder (e.g. .spv files)
#   .gpu-carry/lib/                                  every non-glibc shared library they link to (ldd);
#                                                    files over 4 MiB are stored xz-compressed (NAME.xz) and
#                                                    unpacked by bench.sh (libopenblas: 36 MB -> 4 MB)
#   .gpu-carry/lib-compat/                           libstdc++ and libgcc_s: bench.sh uses them only when the
#                                                    machine's own are missing or too old (a newer system
#                                                    libstdc++ must win, for the NVIDIA driver's sake)
# The Vulkan loader is not packed: it comes from .gl/ (see /work/.library/device/README.md).
#
# Usage: scripts/gpu/pack.sh BUILD_DIR        e.g. scripts/gpu/pack.sh build-lead
set -euo pipefail

die() { echo "pack.sh: $*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: scripts/gpu/pack.sh BUILD_DIR"
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
build=$(cd "$1" 2>/dev/null && pwd) || die "no build folder $1"
bin="$build/bin"
for f in cellm-host cellm-make-model; do [ -x "$bin/$f" ] || die "$bin/$f is missing: build it first"; done
ls "$bin"/plugins/cellm-*.so >/dev/null 2>&1 || die "no plugins in $bin/plugins"
if [ -f "$build/CMakeCache.txt" ]; then
    type=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$build/CMakeCache.txt")
    [ "$type" = Release ] || echo "pack.sh: warning: $build is a '$type' build, not Release" >&2
fi
command -v xz >/dev/null || die "xz is needed (apt-get install xz-utils)"

carry="$root/.gpu-carry"
if ! git -C "$root" check-ignore -q "$carry/"; then
    die ".gpu-carry/ is not ignored by git: add /.gpu-carry/ to .git/info/exclude first"
fi
rm -rf "$carry"
mkdir -p "$carry/bin/plugins" "$carry/lib" "$carry/lib-compat"

objs=("$bin/cellm-host" "$bin/cellm-make-model" "$bin"/plugins/cellm-*.so)
# The grammar mask benchmark too when built (bench/grammar/mask_shards.sh runs it on the machine's CPUs).
[ -x "$bin/grammar_mask_bench" ] && objs+=("$bin/grammar_mask_bench")
cp -a "$bin/plugins/." "$carry/bin/plugins/"
for f in "${objs[@]}"; do
    rel=${f#"$bin"/}
    strip --strip-unneeded -o "$carry/bin/$rel" "$f"
done
# Shaders the Vulkan plugin might read at run time from the build folder would not travel: say so.
spv=$(find "$build" -name '*.spv' -not -path "$bin/plugins/*" 2>/dev/null | head -5)
if [ -n "$spv" ]; then
    echo "pack.sh: note: .spv files outside $bin/plugins are not packed (fine if the plugin embeds its shaders):" >&2
    echo "$spv" | sed 's/^/    /' >&2
fi

# glibc's own libraries exist on every Linux; the Vulkan loader (and GL) come from .gl; the rest travel.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libutil\.so|libvulkan\.so|libGL|libEGL|libOpenGL|libGLX|libGLES|libGLdispatch)'
declare -A seen=()
missing=()
for f in "${objs[@]}"; do
    while read -r name arrow path _; do
        [ "$arrow" = "=>" ] || continue
        [[ $name =~ $skip ]] && continue
        if [ "$path" = "not" ]; then missing+=("$name (needed by ${f##*/})"); continue; fi
        [ -n "${seen[$name]:-}" ] && continue
        seen[$name]=$path
    done < <(ldd "$f")
done
[ ${#missing[@]} -eq 0 ] || die "ldd cannot resolve here: ${missing[*]}"

for name in $(printf '%s\n' "${!seen[@]}" | sort); do
    real=$(readlink -f "${seen[$name]}")
    case $name in
        libstdc++.so.*|libgcc_s.so.*) dest="$carry/lib-compat" ;;
        *) dest="$carry/lib" ;;
    esac
    size=$(stat -c %s "$real")
    if [ "$size" -gt $((4 * 1024 * 1024)) ]; then
        xz -T1 -6 -c "$real" >"$dest/$name.xz"
        printf '  %-24s %6d KiB -> %-28s %6d KiB (xz)\n' "$name" $((size / 1024)) "${dest#"$root"/}/$name.xz" \
            $(($(stat -c %s "$dest/$name.xz") / 1024))
    else
        cp "$real" "$dest/$name"
        printf '  %-24s %6d KiB -> %s\n' "$name" $((size / 1024)) "${dest#"$root"/}/$name"
    fi
done

{
    echo "build: $build"
    echo "commit: $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- 2>/dev/null || echo ' (dirty tree)')"
    echo "packed: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    (cd "$carry" && find bin -type f | sort)
} >"$carry/PACKED"

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
total=$(du -sb "$carry" | cut -f1)
gl=0; [ -d "$root/.gl" ] && gl=$(du -sb "$root/.gl" | cut -f1)
tree=$(cd "$root" && { git ls-files -z; git ls-files -z --others --exclude-standard; } |
       { du -cb --files0-from=- 2>/dev/null || true; } | awk 'END { print $1 + 0 }')
echo "plugins: $(cd "$carry/bin/plugins" && echo *)"
[ -f "$carry/bin/plugins/cellm-vulkan.so" ] || echo "pack.sh: note: no cellm-vulkan.so in $bin/plugins (is the Vulkan backend built?)" >&2
echo ".gpu-carry: $(mib "$total") MiB; .gl: $(mib "$gl") MiB; working tree (tracked + untracked not ignored):" \
     "$(mib "$tree") MiB; together $(mib $((total + gl + tree))) MiB of the 64 MiB a run may take"
[ "$total" -lt $((50 * 1024 * 1024)) ] || die ".gpu-carry is over 50 MiB"
