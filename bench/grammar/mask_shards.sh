#!/usr/bin/env bash
# The whole mask-time replay of grammar_mask_bench (MaskBench's method: every jsonschemabench instance, token by
# token) split into one-thread shards, one per core, for docs/benchmarks.md's table: on a 2-core machine one
# vocabulary takes about an hour; on the lent GPU machine's 16 cores, minutes. Each shard times its masks on one
# thread, as MaskBench does; shards share the caches and memory bus, so the figures are if anything high.
#
#   bench/grammar/mask_shards.sh SCHEMAS OUT MODEL...     e.g. on the lent machine, from the repo root:
#     bench/grammar/mask_shards.sh .gpu-data/jsonschemabench $OUT .gpu-data/*.vocab.gguf
#
# The program comes from .gpu-carry (scripts/gpu/pack.sh packs grammar_mask_bench with the plugins and
# libraries), else build/bin. MODEL may be a tokenizer-only file (scripts/gpu/gguf_tool.py vocab). Writes
# OUT/NAME.K.times (grammar_mask_bench --times), OUT/NAME.K.log and OUT/table.md (bench/grammar/mask_table.py).
# Models run side by side, the shards split between them. Environment: CELLM_MASK_SHARDS (shards in all, default
# nproc), CELLM_MASK_TIMEOUT (seconds, default 540: a shard still running then is stopped and keeps the schemas it
# finished), CELLM_MASK_EVERY (every Nth schema, default 1), CELLM_MASK_SCHEMA_SECONDS (grammar_mask_bench
# --schema-seconds, default 10).
set -euo pipefail
say() { echo "== mask_shards.sh: $*"; }
die() { echo "mask_shards.sh: error: $*" >&2; exit 1; }

[ $# -ge 3 ] || die "usage: bench/grammar/mask_shards.sh SCHEMAS OUT MODEL..."
root=$(cd "$(dirname "$0")/../.." && pwd)
schemas=$1 out=$2
shift 2
mkdir -p "$out"
shards=${CELLM_MASK_SHARDS:-$(nproc)}
if [ -x "$root/.gpu-carry/bin/grammar_mask_bench" ]; then
    # shellcheck source=scripts/gpu/loader.sh
    . "$root/scripts/gpu/loader.sh"
    bin=$root/.gpu-carry/bin
    use_carried_libraries "$root/.gpu-carry" /tmp/cellm-mask-lib "$bin/grammar_mask_bench" "$bin"/plugins/*.so
else
    bin=$root/build/bin
fi
[ -x "$bin/grammar_mask_bench" ] || die "no grammar_mask_bench in $bin"
say "$(uname -m), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $shards shards"

per_model=$((shards / $#))
((per_model >= 1)) || die "fewer shards ($shards) than models ($#)"
for model in "$@"; do
    name=$(basename "$model" .gguf)
    rm -f "$out/$name".*.times "$out/$name".*.log
    for ((k = 0; k < per_model; ++k)); do
        timeout "${CELLM_MASK_TIMEOUT:-540}" "$bin/grammar_mask_bench" --model "$(realpath "$model")" \
            --schemas "$schemas" --plugins "$bin/plugins" --every "${CELLM_MASK_EVERY:-1}" \
            --schema-seconds "${CELLM_MASK_SCHEMA_SECONDS:-10}" --shard "$k/$per_model" \
            --times "$out/$name.$k.times" >"$out/$name.$k.log" 2>&1 &
    done
done
start=$SECONDS
cut=0
for job in $(jobs -p); do wait "$job" || cut=$((cut + 1)); done
say "$((SECONDS - start)) s; $cut of $((per_model * $#)) shards stopped by the timeout or failed"
rows=()
for model in "$@"; do
    name=$(basename "$model" .gguf)
    say "$name: $(cat "$out/$name".*.log | grep -c 'replay stopped' || true) schemas stopped at the per-schema limit," \
        "$(cat "$out/$name".*.log | grep -c '^schemas:' || true) of $per_model shards finished"
    files=$(find "$out" -name "$name.*.times" | paste -sd, -)
    [ -n "$files" ] && rows+=("$name=$files")
done
[ ${#rows[@]} -gt 0 ] || die "no shard wrote a times file (logs: $out/*.log)"
python3 "$root/bench/grammar/mask_table.py" "${rows[@]}" | tee "$out/table.md"
