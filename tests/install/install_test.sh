#!/usr/bin/env bash
# Installs cellm into a fresh prefix P and checks, with nothing but P:
#  - P/bin/cellm-host finds the installed plugins with no configuration (none from the build tree, none skipped);
#  - examples/plugins/minigguf, copied out of the source tree, builds with find_package(Cellm) and CMAKE_PREFIX_PATH=P
#    alone, warning-free; `cellm-host plugins --path` lists it; a manifest naming it (format = "minigguf") gives the
#    same greedy tokens on a synthetic model as one naming cellm's gguf plugin;
#  - installed into P, the plugin is found with no configuration by cellm-host and by libcellm;
#  - examples/sdk/example.c builds against Cellm::cellm (find_package) and against cellm.pc, and runs on that
#    manifest; the plugin compiles with cellm-plugin.pc.
# usage: install_test.sh BUILD_DIR SOURCE_DIR CMAKE CELLM_MAKE_MODEL CC PKG_CONFIG [SANITIZE_FLAGS]
set -euo pipefail
build=$1 source=$2 cmake=$3 make_model=$4 cc=$5 pkg_config=$6 sanitize=${7:-}
# A sanitized build's libcellm needs the sanitizer runtime in every program that loads it.
sanitize=${sanitize//;/ }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
P=$work/prefix
fail() {
    echo "install test: $*" >&2
    exit 1
}
unset CELLM_PLUGIN_PATH

"$cmake" --install "$build" --prefix "$P" > /dev/null

"$P/bin/cellm-host" plugins > "$work/plugins.txt" || fail "installed cellm-host plugins failed"
for name in gguf llama scalar; do
    grep -q " $P/lib/cellm/plugins/cellm-$name.so\$" "$work/plugins.txt" ||
        fail "installed cellm-host does not list $P/lib/cellm/plugins/cellm-$name.so: $(cat "$work/plugins.txt")"
done
if grep -q -e "$build" -e '^skipped' "$work/plugins.txt"; then
    fail "installed cellm-host loaded from the build tree or skipped a plugin: $(cat "$work/plugins.txt")"
fi

cp -r "$source/examples/plugins/minigguf" "$work/minigguf"
example=$work/minigguf-build
"$cmake" -S "$work/minigguf" -B "$example" -DCMAKE_PREFIX_PATH="$P" -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_C_FLAGS="-Werror $sanitize" > /dev/null ||
    fail "the example does not configure against $P"
grep -q "^Cellm_DIR:PATH=$P/lib/cmake/Cellm\$" "$example/CMakeCache.txt" || fail "the example found another Cellm"
"$cmake" --build "$example" > "$work/example-build.txt" 2>&1 ||
    fail "the example does not build: $(cat "$work/example-build.txt")"

"$P/bin/cellm-host" plugins --path "$example" > "$work/plugins.txt" || fail "cellm-host plugins --path failed"
grep -q "^format  *minigguf .* $example/cellm-minigguf.so\$" "$work/plugins.txt" ||
    fail "cellm-host plugins --path $example does not list minigguf: $(cat "$work/plugins.txt")"

"$make_model" --out "$work/tiny.gguf" --type q8_0
manifest() { # FILE FORMAT [PLUGIN_FOLDER]
    printf '[model]\npath = "tiny.gguf"\nformat = "%s"\n[backend]\nname = "scalar"\nthreads = 1\n' "$2" > "$1"
    printf '[context]\nlength = 64\n[sampling]\ntemperature = 0\nmax_tokens = 8\n' >> "$1"
    if [[ $# -gt 2 ]]; then printf '[plugins]\npaths = ["%s"]\n' "$3" >> "$1"; fi
}
tokens() { # MANIFEST: the greedy token ids
    "$P/bin/cellm-host" run --manifest "$1" --prompt "the cat sat" --raw --json | grep -o '"tokens":\[[0-9,]*\]' ||
        fail "cellm-host run --manifest $1 failed"
}
manifest "$work/gguf.toml" gguf
manifest "$work/minigguf.toml" minigguf "$example"
manifest "$work/installed.toml" minigguf
expected=$(tokens "$work/gguf.toml")
[[ $expected =~ ^\"tokens\":\[([0-9]+,){7}[0-9]+\]$ ]] || fail "expected 8 greedy tokens from gguf, got $expected"
got=$(tokens "$work/minigguf.toml")
[[ $got == "$expected" ]] || fail "minigguf gave $got, gguf $expected"

"$cmake" --install "$example" --prefix "$P" > /dev/null
"$P/bin/cellm-host" plugins > "$work/plugins.txt" || fail "installed cellm-host plugins failed"
grep -q "^format  *minigguf .* $P/lib/cellm/plugins/cellm-minigguf.so\$" "$work/plugins.txt" ||
    fail "the installed example is not listed: $(cat "$work/plugins.txt")"
got=$(tokens "$work/installed.toml")
[[ $got == "$expected" ]] || fail "the installed minigguf gave $got, gguf $expected"

"$cmake" -S "$source/tests/install/sdk_app" -B "$work/sdk_app" -DCMAKE_PREFIX_PATH="$P" -DCMAKE_C_COMPILER="$cc" \
    -DEXAMPLE="$source/examples/sdk/example.c" -DCMAKE_C_FLAGS="$sanitize" > /dev/null ||
    fail "examples/sdk/example.c does not configure against Cellm::cellm"
"$cmake" --build "$work/sdk_app" > "$work/sdk-build.txt" 2>&1 ||
    fail "the SDK example does not build against Cellm::cellm: $(cat "$work/sdk-build.txt")"
run_example() { # PROGRAM
    "$1" "$work/installed.toml" "the cat" > "$work/example.txt" || fail "$1 failed: $(cat "$work/example.txt")"
    grep -q "(llama) on scalar" "$work/example.txt" || fail "unexpected output of $1: $(cat "$work/example.txt")"
}
run_example "$work/sdk_app/example"

# PKG_CONFIG_LIBDIR replaces the default search path: the .pc files of P or none.
export PKG_CONFIG_LIBDIR=$P/lib/pkgconfig
sdk_flags=$("$pkg_config" --cflags --libs cellm) || fail "pkg-config knows no cellm"
plugin_flags=$("$pkg_config" --cflags cellm-plugin) || fail "pkg-config knows no cellm-plugin"
# shellcheck disable=SC2086 # the flags are lists
"$cc" -std=c99 -pedantic -Wall -Wextra -Werror $sanitize "$source/examples/sdk/example.c" $sdk_flags \
    -Wl,-rpath,"$P/lib" -o "$work/example" || fail "examples/sdk/example.c does not build against cellm.pc"
run_example "$work/example"
# shellcheck disable=SC2086
"$cc" -std=c99 -pedantic -Wall -Wextra -Wconversion -Werror -fPIC -shared $sanitize "$work/minigguf/minigguf.c" \
    $plugin_flags -o "$work/pc-plugin.so" || fail "the example plugin does not build with cellm-plugin.pc"
echo "install test: passed ($P)"
