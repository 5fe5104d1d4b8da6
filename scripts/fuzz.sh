#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) in build-fuzz/ with clang and runs them.
#
#   scripts/fuzz.sh TARGET SECONDS     one target: gguf cellm safetensors pytorch manifest bpe spm chat_template
#                                      image grammar json_schema http_request jinja_template tool_call
#   scripts/fuzz.sh all SECONDS        every target in turn (FUZZ_PARALLEL=2: two at a time)
#
# Seeds come from fuzz/make_corpus.sh (written once into build-fuzz/corpus/TARGET; new inputs libFuzzer finds
# are kept there). A crash is saved under build-fuzz/crashes/TARGET/ and its path printed; the script then exits
# non-zero. Reproduce one with: build-fuzz/bin/fuzz/fuzz_TARGET PATH. Logs: build-fuzz/logs/TARGET.N.log (worker N).
# Environment: CC/CXX (default clang/clang++), FUZZ_JOBS (build parallelism, default 2), FUZZ_PARALLEL
# (targets at once for `all`, default 1), FUZZ_WORKERS (processes per target on its one corpus, each with its
# own seed, default 1), FUZZ_ARGS (extra libFuzzer flags).
set -euo pipefail

targets=(gguf cellm safetensors pytorch manifest bpe spm chat_template jinja_template image grammar json_schema http_request
         tool_call)
if [[ $# -ne 2 || ! $2 =~ ^[0-9]+$ ]]; then
  echo "usage: $0 TARGET|all SECONDS   (targets: ${targets[*]})" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-fuzz
if [[ $1 == all ]]; then
  run=("${targets[@]}")
else
  [[ " ${targets[*]} " == *" $1 "* ]] || { echo "$0: unknown target '$1' (${targets[*]})" >&2; exit 2; }
  run=("$1")
fi
seconds=$2

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCELLM_FUZZ=ON -DCELLM_BUILD_TESTS=OFF \
  -DCELLM_BUILD_BENCH=OFF -DCMAKE_C_COMPILER="${CC:-clang}" -DCMAKE_CXX_COMPILER="${CXX:-clang++}" >/dev/null
cmake --build "$build" -j "${FUZZ_JOBS:-2}" --target $(printf 'fuzz_%s ' "${run[@]}")

# Seeds: synthetic models need cellm-make-model (and cellm-host for .cellm); build/bin's are used when there.
need_corpus=0
for t in "${run[@]}"; do [[ -d $build/corpus/$t ]] || need_corpus=1; done
if [[ $need_corpus == 1 ]]; then
  if [[ ! -x $root/build/bin/cellm-make-model || ! -x $root/build/bin/cellm-host ]]; then
    cmake --build "$build" -j "${FUZZ_JOBS:-2}" --target cellm-make-model cellm-host cellm_plugins
    export CELLM_BIN=$build/bin
  fi
  "$root/fuzz/make_corpus.sh" "$build/corpus"
fi

fuzz_one() {
  local t=$1 crashes=$build/crashes/$1 workers=${FUZZ_WORKERS:-1}
  mkdir -p "$crashes" "$build/logs" "$build/corpus/$t"
  local rc=0 max_len=8192 start=$SECONDS w pids=()
  case $t in gguf | cellm | safetensors) max_len=1048576 ;; image | pytorch) max_len=65536 ;; esac
  # -rss_limit_mb/-malloc_limit_mb: an allocation sized by the input beyond 2 GiB counts as a finding.
  for ((w = 1; w <= workers; ++w)); do
    "$build/bin/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2560 -malloc_limit_mb=2048 \
      -max_len=$max_len -print_final_stats=1 -seed=$((w * 7919)) -artifact_prefix="$crashes/" ${FUZZ_ARGS:-} \
      "$build/corpus/$t" >"$build/logs/$t.$w.log" 2>&1 &
    pids+=($!)
  done
  for w in "${pids[@]}"; do wait "$w" || rc=$?; done
  local took=$((SECONDS - start)) runs=0 n found
  for ((w = 1; w <= workers; ++w)); do
    n=$(grep -aEo 'stat::number_of_executed_units: *[0-9]+' "$build/logs/$t.$w.log" | grep -Eo '[0-9]+$' | tail -1 || true)
    runs=$((runs + ${n:-0}))
  done
  found=$(cat "$build/logs/$t".*.log | grep -aEo "Test unit written to [^ ]+" | sed 's/Test unit written to //' || true)
  printf '%-14s %6ss x %s  %12s executions  ' "$t" "$took" "$workers" "$runs"
  if [[ $rc -eq 0 && -z $found ]]; then
    echo "no findings"
  else
    echo "FINDING (exit $rc): ${found:-see $build/logs/$t.*.log}"
    cat "$build/logs/$t".*.log | grep -a -m3 -E 'ERROR: |runtime error|fuzz invariant|internal error' | sed 's/^/    /' || true
  fi
  return $rc
}

status=0
parallel=${FUZZ_PARALLEL:-1}
pids=()
for t in "${run[@]}"; do
  if (( parallel > 1 )); then
    fuzz_one "$t" & pids+=($!)
    if (( ${#pids[@]} >= parallel )); then wait "${pids[0]}" || status=1; pids=("${pids[@]:1}"); fi
  else
    fuzz_one "$t" || status=1
  fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
