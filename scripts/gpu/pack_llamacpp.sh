#!/usr/bin/env bash
# Pack a llama.cpp Vulkan build's llama-bench into .gpu-llama/ (repo root), for the device tool's `carry` list
# next to .gl (and .gpu-carry): [".gl", ".gpu-carry", ".gpu-llama"]. scripts/gpu/bench_llamacpp.sh runs it there.
#   .gpu-llama/bin/llama-bench          stripped copy
#   .gpu-llama/lib/                     every non-glibc shared library it links to (ldd: libllama, libggml*,
#                                       libgomp, ...), the build's own stripped; files over 4 MiB are stored
#                                       xz-compressed (NAME.xz) and unpacked by bench_llamacpp.sh
#   .gpu-llama/lib-compat/              libstdc++ and libgcc_s, used only where the machine's own are too old
#   .gpu-llama/PACKED                   build folder, llama.cpp commit, glslc, Vulkan headers, shader features
# The Vulkan loader is not packed: it comes from .gl/ (see scripts/gpu/README.md).
#
# Usage: scripts/gpu/pack_llamacpp.sh BUILD_DIR     e.g. scripts/gpu/pack_llamacpp.sh /tmp/llama-vk-build
# (how to build it: scripts/gpu/README.md, "llama.cpp's Vulkan backend, side by side")
set -euo pipefail

die() { echo "pack_llamacpp.sh: $*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: scripts/gpu/pack_llamacpp.sh BUILD_DIR"
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
build=$(cd "$1" 2>/dev/null && pwd) || die "no build folder $1"
exe="$build/bin/llama-bench"
[ -x "$exe" ] || die "$exe is missing: build it first (cmake --build $1 --target llama-bench)"
cache="$build/CMakeCache.txt"
cachevar() { if [ -f "$cache" ]; then sed -n "s/^$1:[A-Z]*=//p" "$cache"; fi; }
type=$(cachevar CMAKE_BUILD_TYPE)
[ "$type" = Release ] || echo "pack_llamacpp.sh: warning: $build is a '$type' build, not Release" >&2
[ "$(cachevar GGML_VULKAN)" = ON ] || echo "pack_llamacpp.sh: warning: $build is not configured with GGML_VULKAN=ON" >&2
command -v xz >/dev/null || die "xz is needed (apt-get install xz-utils)"

carry="$root/.gpu-llama"
if ! git -C "$root" check-ignore -q "$carry/"; then
    die ".gpu-llama/ is not ignored by git: add /.gpu-llama/ to .git/info/exclude first"
fi
rm -rf "$carry"
mkdir -p "$carry/bin" "$carry/lib" "$carry/lib-compat"
strip --strip-unneeded -o "$carry/bin/llama-bench" "$exe"

# glibc's own libraries exist on every Linux; the Vulkan loader (and GL) come from .gl; the rest travel.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libutil\.so|libvulkan\.so|libGL|libEGL|libOpenGL|libGLX|libGLES|libGLdispatch)'
declare -A seen=()
missing=()
while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    [[ $name =~ $skip ]] && continue
    if [ "$path" = "not" ]; then missing+=("$name"); continue; fi
    seen[$name]=$path
done < <(ldd "$exe")
[ ${#missing[@]} -eq 0 ] || die "ldd cannot resolve here: ${missing[*]}"
[ -n "${seen[libggml-vulkan.so]:-}" ] || ls "$build"/bin/libggml-vulkan.so* >/dev/null 2>&1 ||
    die "no libggml-vulkan in $build: configure with -DGGML_VULKAN=ON"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for name in $(printf '%s\n' "${!seen[@]}" | sort); do
    real=$(readlink -f "${seen[$name]}")
    case $name in
        libstdc++.so.*|libgcc_s.so.*) dest="$carry/lib-compat" ;;
        *) dest="$carry/lib" ;;
    esac
    src=$real
    if [[ $real == "$build"/* ]]; then  # the build's own libraries: stripped
        strip --strip-unneeded -o "$tmp/$name" "$real"
        src="$tmp/$name"
    fi
    size=$(stat -c %s "$src")
    if [ "$size" -gt $((4 * 1024 * 1024)) ]; then
        xz -T1 -9 -c "$src" >"$dest/$name.xz"
        printf '  %-24s %6d KiB -> %-30s %6d KiB (xz)\n' "$name" $((size / 1024)) "${dest#"$root"/}/$name.xz" \
            $(($(stat -c %s "$dest/$name.xz") / 1024))
    else
        cp "$src" "$dest/$name"
        printf '  %-24s %6d KiB -> %s\n' "$name" $((size / 1024)) "${dest#"$root"/}/$name"
    fi
done

# What was built, for the record: bench_llamacpp.sh prints this.
features=$(grep -ho 'GGML_VULKAN_[A-Z0-9_]*_GLSLC_SUPPORT' "$build/build.ninja" 2>/dev/null | sort -u |
           sed 's/^GGML_VULKAN_//; s/_GLSLC_SUPPORT$//' | tr 'A-Z\n' 'a-z ' || true)
glslc=$(cachevar Vulkan_GLSLC_EXECUTABLE)
vkinc=$(cachevar Vulkan_INCLUDE_DIR)
{
    echo "build: $build"
    commit=$(cachevar LLAMA_BUILD_COMMIT)
    echo "llama.cpp commit: ${commit:-not given by -DLLAMA_BUILD_COMMIT, see the build line of llama-bench}"
    echo "glslc: ${glslc:-?} ($({ "$glslc" --version 2>/dev/null || true; } | head -1))"
    echo "Vulkan headers: ${vkinc:-?} (VK_HEADER_VERSION $(sed -n 's/^#define VK_HEADER_VERSION //p' "$vkinc/vulkan/vulkan_core.h" 2>/dev/null))"
    echo "shader features glslc supported: ${features:-none}"
    echo "packed: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} >"$carry/PACKED"
cat "$carry/PACKED"

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
size_of() { if [ -d "$1" ]; then du -sb "$1" | cut -f1; else echo 0; fi; }
total=$(size_of "$carry")
gl=$(size_of "$root/.gl")
cellm=$(size_of "$root/.gpu-carry")
tree=$(cd "$root" && { git ls-files -z; git ls-files -z --others --exclude-standard; } |
       { du -cb --files0-from=- 2>/dev/null || true; } | awk 'END { print $1 + 0 }')
echo ".gpu-llama: $(mib "$total") MiB; .gpu-carry: $(mib "$cellm") MiB; .gl: $(mib "$gl") MiB; working tree" \
     "(tracked + untracked not ignored): $(mib "$tree") MiB; together $(mib $((total + cellm + gl + tree))) MiB of the" \
     "64 MiB a run may take"
[ "$total" -lt $((35 * 1024 * 1024)) ] || die ".gpu-llama is over 35 MiB"
