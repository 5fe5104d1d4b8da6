# Sourced by scripts/gpu/bench.sh and bench_llamacpp.sh (which define say and die).
# setup_vulkan_loader makes the Vulkan loader and the NVIDIA driver's ICD visible on the lent GPU machine, as
# /work/.library/device/README.md says.
#   CELLM_GPU_SETUP  1: unpack $root/.gl/*.deb into / and ldconfig (root only); 0: skip it. Default auto: do it
#                    when root, .gl/ exists and ldconfig knows no libvulkan.
setup_vulkan_loader() {
    local setup=${CELLM_GPU_SETUP:-auto} gl="$root/.gl"
    if [ "$setup" = auto ]; then
        setup=0
        if [ "$(id -u)" = 0 ] && [ -d "$gl" ] && ! ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1'; then setup=1; fi
    fi
    if [ "$setup" = 1 ]; then
        [ "$(id -u)" = 0 ] || die "CELLM_GPU_SETUP=1 unpacks into / and needs root"
        ls "$gl"/*.deb >/dev/null 2>&1 || die "no .gl/*.deb: download them once as scripts/gpu/README.md says, and carry .gl"
        say "unpacking $(ls "$gl"/*.deb | wc -l) loader debs from .gl into /"
        for f in "$gl"/*.deb; do dpkg -x "$f" /; done
        ldconfig
    else
        say "loader setup skipped (CELLM_GPU_SETUP=${CELLM_GPU_SETUP:-auto})"
    fi
    local icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json egl=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
    if [ -f "$icd" ]; then
        export VK_DRIVER_FILES=$icd
        if [ -f "$egl" ]; then export __EGL_VENDOR_LIBRARY_FILENAMES=$egl; fi
    fi
}

# The shared libraries a packed carry folder needs (pack.sh, pack_llamacpp.sh): CARRY/lib copied into LIBDIR with
# its .xz files unpacked, LIBDIR put first on LD_LIBRARY_PATH, and CARRY/lib-compat (libstdc++, libgcc_s) added
# only when this machine's own are missing or too old (a newer system libstdc++ must win, since the NVIDIA
# driver's libraries may need it). Dies naming whatever the OBJECTS still cannot resolve.
# Usage: use_carried_libraries CARRY LIBDIR OBJECT...
use_carried_libraries() {
    local carry=$1 libdir=$2 z still
    shift 2
    rm -rf "$libdir"
    mkdir -p "$libdir"
    cp -a "$carry/lib/." "$libdir/"
    for z in "$libdir"/*.xz; do
        [ -e "$z" ] || continue
        if command -v xz >/dev/null; then
            xz -dc "$z" >"${z%.xz}"
        else
            python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$z" "${z%.xz}"
        fi
        rm -f "$z"
    done
    unresolved() { LD_LIBRARY_PATH=$1 ldd "${@:2}" 2>&1 | grep 'not found' || true; }
    export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    if unresolved "$LD_LIBRARY_PATH" "$@" | grep -qE 'libstdc\+\+|libgcc_s|GLIBCXX|CXXABI|GCC_[0-9]'; then
        say "this machine's libstdc++/libgcc_s are missing or too old: using ${carry##*/}/lib-compat"
        export LD_LIBRARY_PATH="$carry/lib-compat:$LD_LIBRARY_PATH"
    fi
    still=$(unresolved "$LD_LIBRARY_PATH" "$@")
    if [ -n "$still" ]; then
        echo "$still" >&2
        if echo "$still" | grep -q libvulkan; then
            echo "libvulkan.so.1 is not found: carry .gl and let the setup run (CELLM_GPU_SETUP=1)" >&2
        fi
        die "unresolved shared libraries (above)"
    fi
}
