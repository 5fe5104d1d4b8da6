# Sourced by scripts/gpu/bench.sh and bench_llamacpp.sh (which define say and die): makes the Vulkan loader and
# the NVIDIA driver's ICD visible on the lent GPU machine, as /work/.library/device/README.md says.
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
