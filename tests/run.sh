#!/bin/sh
# Runs every test amp has and ends with one summary line, "N passed, N failed".
#   1. build/amp_tests: the C unit tests (every SIMD path against the reference)
#   2. tools/check-layers.sh: the layering rules of src/README.md, and the check's self-test; and
#      tools/longest-functions.sh --max 150: no function over 150 lines
#   3. tests/cli/*.sh: golden tests of the CLI (exit codes, stdout, stderr)
#   4. every examples/*.c built against amp through pkg-config and run
set -u
BUILD=${BUILD:-build}
export AMP="$BUILD/amp"
total_pass=0
total_fail=0

# count LOGFILE STATUS: adds the "N passed, N failed" of a suite's last line to the totals.
count() {
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -n 1)
    if [ -z "$line" ]; then
        echo "run.sh: $2 printed no summary line (exit status $3)" >&2
        total_fail=$((total_fail + 1))
        return
    fi
    p=${line%% passed*}
    f=${line#*passed, }
    f=${f%% failed*}
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + f))
    if [ "$3" != 0 ] && [ "$f" = 0 ]; then
        echo "run.sh: $2 exited with status $3" >&2
        total_fail=$((total_fail + 1))
    fi
}

log=$(mktemp)
trap 'rm -f "$log"' EXIT

echo "== unit tests ($BUILD/amp_tests)"
rc=0
"$BUILD/amp_tests" >"$log" 2>&1 || rc=$?
cat "$log"
count "$log" amp_tests "$rc"

# The bf16 products have two methods on AVX-512 with AVX512-BF16, three with AMX too (amp/gemm.h's
# amp_gemm_bf16_method): the run above used the default (test_gemm.c loops every method itself);
# every test runs again, quick, with each other method, so the ops, LSTM, models and training see
# every kernel on whichever CPU runs this.
info=$("$BUILD/amp" info)
method=$(printf '%s\n' "$info" | sed -n 's/^bf16 products (avx512): \([a-z]*\) (VDPBF16PS.*/\1/p')
if [ -n "$method" ]; then
    others="fma dot"
    printf '%s\n' "$info" | grep -q 'AMX tiles usable' && others="$others amx"
    for other in $others; do
        [ "$other" = "$method" ] && continue
        echo "== unit tests, quick, with AMP_GEMM_BF16=$other (the default here is $method)"
        rc=0
        AMP_TEST_QUICK=1 AMP_GEMM_BF16=$other "$BUILD/amp_tests" >"$log" 2>&1 || rc=$?
        tail -n 1 "$log"
        grep -v '^ok \|^    note\|^# total\|^[0-9]* passed' "$log" | head -n 40
        count "$log" "amp_tests (AMP_GEMM_BF16=$other)" "$rc"
    done
else
    echo "== no AVX512-BF16 here: bf16 has one method (fma), tested above"
fi

# The layering rules of src/README.md: includes, and calls as the built objects' symbols show them;
# then the check's own test (forbidden includes and a cycle injected into a copy must fail).
echo "== layers (tools/check-layers.sh against src/README.md's table)"
rc=0
sh tools/check-layers.sh --objects "$BUILD/obj" >"$log" 2>&1 || rc=$?
cat "$log"
count "$log" check-layers.sh "$rc"
echo "== tools/check-layers.sh --self-test"
rc=0
sh tools/check-layers.sh --self-test >"$log" 2>&1 || rc=$?
cat "$log"
count "$log" "check-layers.sh --self-test" "$rc"

# No function in src/ or tools/amp/ over 150 lines (tools/longest-functions.sh lists the longest).
echo "== function lengths (tools/longest-functions.sh --max 150)"
rc=0
if sh tools/longest-functions.sh --max 150 5 >"$log" 2>&1; then
    cat "$log"; total_pass=$((total_pass + 1))
else
    cat "$log"; echo "FAIL: a function is over 150 lines" >&2; total_fail=$((total_fail + 1))
fi

for t in tests/cli/*.sh; do
    [ "$(basename "$t")" = lib.sh ] && continue
    echo "== $t"
    rc=0
    sh "$t" >"$log" 2>&1 || rc=$?
    cat "$log"
    count "$log" "$t" "$rc"
done

# Every example is a client built through pkg-config against the shared library (the build tree's
# amp.pc carries an rpath) and must run successfully; convert.c is also linked statically.
# EXAMPLE_CFLAGS: the sanitizer run links the instrumented library and needs its runtime flags.
flags=${EXAMPLE_CFLAGS:-}
cflags=$(PKG_CONFIG_PATH="$BUILD" pkg-config --cflags amp)
libs=$(PKG_CONFIG_PATH="$BUILD" pkg-config --libs --static amp)
for ex in examples/*.c; do
    name=$(basename "$ex" .c)
    echo "== example $name (pkg-config client)"
    if cc -std=c11 -Wall -Wextra -Werror $flags "$ex" -o "$BUILD/example_$name" $cflags $libs \
       && "$BUILD/example_$name"; then
        total_pass=$((total_pass + 1))
    else
        echo "FAIL: example $name (built with: cc $ex \$(pkg-config --cflags --libs --static amp))" >&2
        total_fail=$((total_fail + 1))
    fi
done
echo "== example convert, linked statically"
if cc -std=c11 -Wall -Wextra -Werror $flags examples/convert.c -o "$BUILD/example_convert_static" $cflags \
       "$BUILD/libamp.a" $(PKG_CONFIG_PATH="$BUILD" pkg-config --libs-only-other --static amp) -lcjson -lz -lpthread -lm \
   && "$BUILD/example_convert_static" >/dev/null; then
    total_pass=$((total_pass + 1))
else
    echo "FAIL: examples/convert.c against libamp.a" >&2
    total_fail=$((total_fail + 1))
fi

echo "$total_pass passed, $total_fail failed"
[ "$total_fail" = 0 ]
