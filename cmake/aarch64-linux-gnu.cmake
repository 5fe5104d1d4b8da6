# Cross build for 64-bit ARM Linux (phones' and boards' CPUs) with Debian's g++-aarch64-linux-gnu against the
# arm64 multiarch -dev packages (dpkg --add-architecture arm64). scripts/test_arm64.sh sets it all up.
# Tests run through qemu-user. No -L: with libc6:arm64 installed the arm64 loader and libraries sit in the host's
# multiarch folders, and pointing qemu at the cross toolchain's sysroot as well mixes two C libraries (every
# program that starts a thread then hangs). QEMU_CPU picks the CPU model qemu emulates (cortex-a53, cortex-a76,
# max,sve=off ...).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)

# Headers and libraries from the arm64 packages only; programs (glslangValidator, python3) from the build machine.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# pkg-config reads the arm64 .pc files (openblas), never the build machine's.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")
