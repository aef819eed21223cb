#!/usr/bin/env bash
# The libFuzzer targets of tests/fuzz/ (see docs/security.md, "Fuzzing"): builds each with
# clang -fsanitize=fuzzer,address,undefined into build-fuzz/, replays its regression inputs
# (tests/fuzz/regressions/<target>/, every input that ever found a bug), then fuzzes it for a
# bounded time starting from the seed corpus tests/fuzz/corpus/<target>/ (new inputs go to
# build-fuzz/corpus/<target>/, never into the source tree). Any crash, leak, sanitizer report or
# hang fails the run and leaves the input in build-fuzz/artifacts/.
#
#   bash scripts/fuzz.sh [SECONDS] [TARGET...]    # default: 20 s each, every target
#
# Targets: fuzz_http (raw bytes to a live pb_server over a Unix socket), fuzz_sql
# (pb_db_query_json with the authorizer; checks no file is written), fuzz_cli_format (the CLI's
# decoding and formatting of a response body). Called by .ci/run after the sanitizers.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-20}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(fuzz_http fuzz_sql fuzz_cli_format)
# The compiler: FUZZ_CC, else the newest clang-NN whose runtime has libFuzzer (Debian's plain
# `clang` is clang 14 and comes without its compiler-rt: libclang-rt-14-dev is not installed
# with it; .ci/run installs clang-19 with libclang-rt-19-dev), else `clang`.
CC=${FUZZ_CC:-}
if [ -z "$CC" ]; then
    CC=clang
    for v in 21 20 19 18 17 16 15 14; do
        if command -v "clang-$v" >/dev/null &&
            [ -f "$("clang-$v" -print-file-name=libclang_rt.fuzzer-x86_64.a)" ]; then
            CC=clang-$v
            break
        fi
    done
fi
command -v "$CC" >/dev/null || { echo "fuzz.sh: $CC not found (apt-get install clang-19 libclang-rt-19-dev)" >&2; exit 1; }
[ -f "$("$CC" -print-file-name=libclang_rt.fuzzer-x86_64.a)" ] ||
    echo "fuzz.sh: $CC has no libFuzzer runtime (libclang_rt.fuzzer-x86_64.a); install its compiler-rt (libclang-rt-NN-dev)" >&2

OUT=$PWD/build-fuzz   # absolute: fuzz_sql runs in a temporary directory
mkdir -p "$OUT/artifacts"
CFLAGS=(-g -O1 -std=c11 -D_GNU_SOURCE -DPB_VERSION=\"fuzz\" -fsanitize=fuzzer,address,undefined
        -fno-sanitize-recover=undefined -fno-omit-frame-pointer
        -Isrc/common -Isrc/store -Isrc/sql -Isrc/server -Isrc/report -Isrc/cli -Itests/fuzz)
CORE=(src/common/*.c src/store/*.c src/sql/*.c src/server/*.c)
core_libs() { pkg-config --cflags --libs sqlite3 libmicrohttpd jansson; echo -lpthread -lm; }

build() { # target -> $OUT/target, rebuilt when a source is newer
    local t=$1 srcs
    case $t in
        fuzz_http|fuzz_sql) srcs=("tests/fuzz/$t.c" "${CORE[@]}") ;;
        fuzz_cli_format) srcs=(tests/fuzz/fuzz_cli_format.c src/cli/out/format.c src/common/buf.c
                               src/common/jsonw.c src/common/error.c) ;;
        *) echo "fuzz.sh: unknown target $t" >&2; exit 2 ;;
    esac
    if [ -x "$OUT/$t" ] && [ -z "$(find "${srcs[@]}" tests/fuzz/*.h src/*/*.h src/cli/*/*.h -newer "$OUT/$t" | head -1)" ]; then
        return
    fi
    echo "== build $t"
    # shellcheck disable=SC2046
    "$CC" "${CFLAGS[@]}" "${srcs[@]}" -o "$OUT/$t" $(core_libs) $(pkg-config --libs jansson)
}

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
for t in "${TARGETS[@]}"; do
    build "$t"
    reg=$PWD/tests/fuzz/regressions/$t
    if [ -d "$reg" ] && [ -n "$(ls -A "$reg")" ]; then
        echo "== $t: replaying $(ls "$reg" | wc -l) regression inputs"
        "$OUT/$t" -runs=0 "$reg"/* >"$OUT/$t.replay.log" 2>&1 || { cat "$OUT/$t.replay.log" >&2; exit 1; }
    fi
    dict=(); [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="$PWD/tests/fuzz/$t.dict")
    mkdir -p "$OUT/corpus/$t"
    echo "== $t: fuzzing for $SECONDS_EACH s"
    "$OUT/$t" "$OUT/corpus/$t" "$PWD/tests/fuzz/corpus/$t" "${dict[@]}" -max_total_time="$SECONDS_EACH" \
        -timeout=20 -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 \
        -artifact_prefix="$OUT/artifacts/$t-" 2>"$OUT/$t.log" || {
        tail -60 "$OUT/$t.log" >&2
        echo "fuzz.sh: $t found a problem; the input is in $OUT/artifacts/" >&2
        exit 1
    }
    grep -E '^stat::number_of_executed_units|^stat::new_units_added|^#[0-9]+.*DONE' "$OUT/$t.log" || tail -3 "$OUT/$t.log"
done
