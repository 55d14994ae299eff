#!/usr/bin/python3
"""`--device cuda` of adaprec-codec-bench and adaprec-bench where it cannot run.

    bench_device_check.py CUDA_BUILD(0|1) ADAPREC_CODEC_BENCH ADAPREC_BENCH

In a build without CUDA each must fail (exit neither 0 nor 77) with one line saying to configure with
-Dcuda=enabled; in a CUDA build on a machine without a GPU each must print "no CUDA device" and exit 77
(what tools/gpu-check counts as skipped). Where a GPU answers, the device runs are tools/gpu-check's
business: this test then only checks that they succeed. `--device host` (the default) still runs.
Exits 77 when the benchmarks were not built, 1 when a case fails.
"""
import os
import subprocess
import sys

failures = []


def run(command):
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    return proc.returncode, proc.stdout


def report(name, ok, code, text):
    print(f"{name:70s} {'ok' if ok else 'FAIL'}", flush=True)
    if not ok:
        failures.append(name)
        print(f"  exit {code}:\n  " + text[-1500:].replace("\n", "\n  "), flush=True)


def device_case(name, command, cuda_build):
    code, text = run(command)
    lines = [line for line in text.splitlines() if line.strip()]
    if not cuda_build:
        ok = (code not in (0, 77) and len(lines) == 1 and "-Dcuda=enabled" in lines[0]
              and "no CUDA device" not in text)
    elif code == 0:
        ok = True  # a GPU is here: tools/gpu-check times it
    else:
        ok = code == 77 and "no CUDA device" in text and "-Dcuda=enabled" not in text
    report(name, ok, code, text)


def main():
    cuda_build, codec, bench = sys.argv[1] == "1", sys.argv[2], sys.argv[3]
    if not (os.path.exists(codec) and os.path.exists(bench)):
        print("SKIP: benchmarks not built (-Dbench=false)")
        return 77
    what = "CUDA build" if cuda_build else "build without CUDA"
    device_case(f"adaprec-codec-bench --device cuda ({what})",
                [codec, "--device", "cuda", "-n", "1000", "-r", "1", "-f", "fp16,table4"], cuda_build)
    quick = ["-b", "4K", "-e", "4K", "-n", "1", "-w", "0", "--formats", "fp16"]
    for transport in ("mpi", "nccl"):
        device_case(f"adaprec-bench --device cuda --transport {transport} ({what})",
                    [bench, "--device", "cuda", "--transport", transport] + quick, cuda_build)
    code, text = run([bench, "--transport", "nccl"] + quick)
    report("adaprec-bench --transport nccl without --device cuda: usage error",
           code == 2 and "add --device cuda" in text, code, text)
    code, text = run([bench, "--transport", "loopback", "--device", "cuda"] + quick)
    report("adaprec-bench --device cuda --transport loopback: usage error",
           code == 2 and "--transport mpi or nccl" in text, code, text)
    code, text = run([codec, "--device", "host", "-n", "1000", "-r", "1", "-f", "fp16"])
    report("adaprec-codec-bench --device host runs", code == 0 and "\nfp16 " in text and "nan" not in text, code, text)
    print(f"{len(failures)} case(s) failed" if failures else "all cases passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
