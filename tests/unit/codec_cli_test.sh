#!/bin/bash
# adaprec-codec end to end: fp32 round trip is exact, encode|decode equals roundtrip, stdin/stdout
# work, and bad input gives one clear error line and exit code 1.
set -u
tool=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

head -c 40000 /dev/urandom > "$dir/in.f32"
"$tool" roundtrip --format fp32 "$dir/in.f32" "$dir/rt.f32" || fail "fp32 roundtrip exited $?"
cmp -s "$dir/in.f32" "$dir/rt.f32" || fail "fp32 roundtrip is not bit-exact"

for f in fp16 fp8s table3; do
  "$tool" encode --format $f "$dir/in.f32" "$dir/$f.chunk" || fail "encode $f"
  "$tool" decode --format $f "$dir/$f.chunk" "$dir/$f.dec" || fail "decode $f"
  "$tool" roundtrip --format $f - - < "$dir/in.f32" > "$dir/$f.rt" || fail "roundtrip $f via stdin/stdout"
  cmp -s "$dir/$f.dec" "$dir/$f.rt" || fail "$f: encode+decode differs from roundtrip"
  [ "$(stat -c %s "$dir/$f.dec")" = 40000 ] || fail "$f: decoded size"
done
[ "$(stat -c %s "$dir/table3.chunk")" -lt 4000 ] || fail "table3 chunk is not compressed"

err=$("$tool" roundtrip --format fp9 "$dir/in.f32" "$dir/x" 2>&1); rc=$?
[ $rc = 1 ] || fail "unknown format: exit code $rc"
echo "$err" | grep -q "valid formats: fp32, bf16" || fail "unknown format message: $err"

head -c 100 "$dir/fp16.chunk" > "$dir/cut.chunk"
err=$("$tool" decode --format fp16 "$dir/cut.chunk" "$dir/x" 2>&1); rc=$?
[ $rc = 1 ] || fail "truncated chunk: exit code $rc"
echo "$err" | grep -q "truncated" || fail "truncated chunk message: $err"

err=$("$tool" decode --format fp8 "$dir/fp16.chunk" "$dir/x" 2>&1); rc=$?
[ $rc = 1 ] && echo "$err" | grep -q "holds fp16 but fp8 was expected" || fail "format mismatch: $rc $err"

# A full disk fails at the close of the output, which was not checked (exit 0, an empty file).
if [ -w /dev/full ]; then
  err=$("$tool" roundtrip --format fp16 "$dir/in.f32" /dev/full 2>&1); rc=$?
  [ $rc = 1 ] && echo "$err" | grep -q "cannot write '/dev/full'" || fail "full disk: $rc $err"
fi

head -c 10 "$dir/in.f32" > "$dir/odd.f32"
err=$("$tool" encode --format fp16 "$dir/odd.f32" "$dir/x" 2>&1); rc=$?
[ $rc = 1 ] && echo "$err" | grep -q "whole number of float32" || fail "odd-sized input: $rc $err"

err=$("$tool" encode --format fp16 "$dir/does-not-exist.f32" "$dir/x" 2>&1); rc=$?
[ $rc = 1 ] && echo "$err" | grep -q "cannot open" && ! echo "$err" | grep -q " at .*:[0-9]" ||
  fail "missing input: one line without the check's file:line: $rc $err"

# env: every invalid value is named (not only the first the library reads), each marked; a valid
# environment exits 0; values valid alone but refused together still fail.
out=$(ADAPREC_FORMAT=fp9 ADAPREC_TIMEOUT=-1 ADAPREC_ALGO=ring "$tool" env 2>"$dir/env.err"); rc=$?
[ $rc = 1 ] || fail "env with two invalid values: exit code $rc"
grep -q "ADAPREC_FORMAT='fp9' is invalid" "$dir/env.err" && grep -q "ADAPREC_TIMEOUT='-1' is invalid" "$dir/env.err" ||
  fail "env names both invalid values: $(cat "$dir/env.err")"
echo "$out" | grep -q "set to:  'ring' (valid)" && echo "$out" | grep -q "set to:  'fp9' (INVALID)" ||
  fail "env marks each set value: $out"
ADAPREC_FORMAT=fp8 "$tool" env >/dev/null 2>&1 || fail "env with a valid environment failed"
err=$(ADAPREC_ALGO=native ADAPREC_FORMAT=fp8 "$tool" env 2>&1 >/dev/null); rc=$?
[ $rc = 1 ] && echo "$err" | grep -q "carries fp32, bf16 or fp16 only" || fail "env, native with fp8: $rc $err"

echo "codec CLI: all checks passed"
