#!/usr/bin/python3
"""Messages of adaprec-bench and adaprec-codec-bench for values they cannot use.

    bench_cli_check.py ADAPREC_BENCH ADAPREC_CODEC_BENCH [MPIRUN]

Each case must fail (non-zero exit, no traceback, no bare `std::bad_alloc`, no CLI11 "not in range 0 to
1.797...e308") with a message that names the option and says what is valid. Exits 77 when the benchmarks
were not built, 1 when a case fails.
"""
import os
import subprocess
import sys
import time

failures = []


def case(name, command, must_contain, code=None):
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    text = proc.stdout
    listed = text.split("valid", 1)[1] if "valid" in text else ""
    ok = (proc.returncode != 0 and (code is None or proc.returncode == code) and all(s in text for s in must_contain) and "bad_alloc" not in text
          and "adaptive" not in listed
          and "e+308" not in text and "nan" not in text and "inf " not in text)
    print(f"{name:60s} {'ok' if ok else 'FAIL'}", flush=True)
    if not ok:
        failures.append(name)
        print(f"  exit {proc.returncode}:\n  " + text[-1500:].replace("\n", "\n  "), flush=True)


def full_stdout_case(name, command, must_contain):
    """The command's standard output goes to /dev/full: it must fail (exit 1) and say so on stderr."""
    with open("/dev/full", "w") as full:
        proc = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    ok = proc.returncode == 1 and all(s in proc.stderr for s in must_contain)
    print(f"{name:60s} {'ok' if ok else 'FAIL'}", flush=True)
    if not ok:
        failures.append(name)
        print(f"  exit {proc.returncode}:\n  " + proc.stderr[-1500:].replace("\n", "\n  "), flush=True)


def main():
    bench, codec = sys.argv[1], sys.argv[2]
    if not (os.path.exists(bench) and os.path.exists(codec)):
        print("SKIP: benchmarks not built (-Dbench=false)")
        return 77
    loop = [bench, "--transport", "loopback", "--ranks", "2", "-n", "1", "-w", "0"]
    case("adaprec-bench -f 1 with -b < -e", loop + ["-b", "4", "-e", "1K", "-f", "1"], ["-f 1", "-f > 1", "-b = -e"])
    case("adaprec-bench -f 0.5", loop + ["-f", "0.5"], ["--stepfactor", ">= 1"])
    case("adaprec-bench -n 0", loop + ["-n", "0"], ["--iters", "integer in [1, 2147483647]"])
    case("adaprec-bench -w -1", loop + ["-w", "-1"], ["--warmup_iters", "integer in [0, 2147483647]"])
    # Integers as digits, within the option's type: "1e3" and 2^31 passed the old check and failed
    # CLI11's conversion ("Could not convert"); a seed beyond 2^64 - 1 was saturated silently.
    case("adaprec-bench -n 1e3", loop + ["-n", "1e3"], ["--iters", "got '1e3'"])
    case("adaprec-bench -n 2147483648", loop + ["-n", "2147483648"], ["--iters", "2147483647"])
    case("adaprec-bench --seed 2^64", loop + ["--seed", "18446744073709551616"], ["--seed", "18446744073709551615"])
    case("adaprec-bench -c 2", loop + ["-c", "2"], ["--check", "[0, 1]"])
    case("adaprec-bench --ranks 0", loop + ["--ranks", "0"], ["--ranks", "integer in [1, 2147483647]"])
    for formats in ("fp16,bogus", "fp16,adaptive"):
        case(f"adaprec-bench --formats {formats} (the list omits 'adaptive')", loop + ["--formats", formats],
             ["--formats", "fastest", "or all"])
    # A factor barely above 1 made rows without end (a hang at 100 % CPU), sizes wrapped around 2^64,
    # and outputs that cannot be written were found only after the sweep (or never: /dev/full).
    case("adaprec-bench -f 1.0000000000000002 (no endless sweep)", loop + ["-b", "1K", "-e", "2K", "-f", "1.0000000000000002"],
         ["-f 1.0000000000000002", "at most 1000"])
    case("adaprec-bench -e 17592186044417M (no wrap-around)", loop + ["-e", "17592186044417M"], ["too large"])
    case("adaprec-bench -e 8G (2^31 floats)", loop + ["-b", "8G", "-e", "8G"], ["-e must be below 8G"])
    case("adaprec-bench -J ''", loop + ["-J", ""], ["-J/--json needs a file name"])
    case("adaprec-bench -J x --csv x", loop + ["-J", "x.out", "--csv", "x.out"], ["the same file"])
    case("adaprec-bench -J /nonexistent/x.json (before the sweep)", loop + ["-J", "/nonexistent/x.json"],
         ["cannot write /nonexistent/x.json", "No such file"], code=2)
    if os.path.exists("/dev/full"):
        case("adaprec-bench --csv /dev/full", loop + ["-b", "4", "-e", "4", "--formats", "fp16", "--csv", "/dev/full"],
             ["error writing /dev/full", "No space"])
        case("adaprec-codec-bench -J /dev/full", [codec, "-n", "1000", "-r", "1", "-f", "fp16", "-J", "/dev/full"],
             ["error writing /dev/full"])
        # The table itself into a full disk: exit 0 with an empty file before.
        full_stdout_case("adaprec-bench > /dev/full", loop + ["-b", "4", "-e", "4", "--formats", "fp16"],
                         ["adaprec-bench: cannot write the results to standard output"])
        full_stdout_case("adaprec-codec-bench > /dev/full", [codec, "-n", "1000", "-r", "1", "-f", "fp16"],
                         ["adaprec-codec-bench: cannot write the results to standard output"])
    # A sweep killed before its end (a job's walltime) left the previous run's JSON under this run's
    # name; now the file is emptied before the sweep. Killed once it is empty (60 s at most).
    stale = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"adaprec-bench-stale-{os.getpid()}.json")
    with open(stale, "w") as f:
        f.write('[{"size": 4, "algo": "an earlier run"}]\n')
    proc = subprocess.Popen([bench, "--transport", "loopback", "--ranks", "2", "-b", "64M", "-e", "64M", "-n", "1000",
                             "--formats", "fp32", "-J", stale],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while os.path.getsize(stale) > 0 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    ok = os.path.getsize(stale) == 0
    os.remove(stale)
    print(f"{'adaprec-bench killed mid-sweep leaves no earlier run in -J':60s} {'ok' if ok else 'FAIL'}", flush=True)
    if not ok:
        failures.append("stale -J file")
    case("adaprec-bench --ranks without --transport loopback", [bench, "--ranks", "7"], ["--transport loopback", "-np"])
    case("adaprec-codec-bench -f ''", [codec, "-n", "1000", "-f", ""], ["-f names no format"], code=2)
    case("adaprec-codec-bench -f bogus (exit 2)", [codec, "-n", "1000", "-f", "bogus"], ["bogus"], code=2)
    case("adaprec-codec-bench -n 0", [codec, "-n", "0", "-f", "fp16"], ["--count", "integer"])
    case("adaprec-codec-bench -n 1e11", [codec, "-n", "1e11", "-f", "fp16"], ["-n 100000000000", "GiB", "smaller -n"])
    case("adaprec-codec-bench -n 100000000000", [codec, "-n", "100000000000", "-f", "fp16"], ["smaller -n"])
    case("adaprec-codec-bench -r 0", [codec, "-r", "0", "-f", "fp16"], ["--reps", "integer in [1, 2147483647]"])
    if len(sys.argv) > 3:  # mpirun: ranks given different arguments (an MPMD launch) are refused at once
        mpi = [sys.argv[3], "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader"]
        one = ["-n", "1", "-w", "0", "-b", "4", "-e", "4", "--formats", "fp16"]
        # Before: the ranks timed different sizes and failed in the baseline with MPI_ERR_TRUNCATE.
        case("adaprec-bench, ranks with different -e (MPMD)",
             mpi + ["-np", "1", bench] + one + [":", "-np", "1", bench] + one[:-3] + ["1K", "--formats", "fp16"],
             ["rank(s) 1 were given other arguments than rank 0", "-e 4", "same command line"], code=2)
        # One rank's value is invalid: refused as a different command line, not a usage error on one rank
        # while the other waits.
        case("adaprec-bench, one rank with -n 0 (MPMD)",
             mpi + ["-np", "2", bench] + one + [":", "-np", "1", bench, "-n", "0"] + one[2:],
             ["rank(s) 2 were given other arguments", "same command line"], code=2)
        proc = subprocess.run(mpi + ["-np", "2", bench] + one, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=120)
        ok = proc.returncode == 0 and "fp16" in proc.stdout
        print(f"{'adaprec-bench, 2 ranks with the same arguments run':60s} {'ok' if ok else 'FAIL'}", flush=True)
        if not ok:
            failures.append("mpirun same arguments")
            print(proc.stdout[-1500:])
    # A good run still works (and the valid ones print no nan).
    proc = subprocess.run([codec, "-n", "1000", "-r", "1", "-f", "fp16"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120)
    ok = proc.returncode == 0 and "fp16" in proc.stdout and "nan" not in proc.stdout
    print(f"{'adaprec-codec-bench -n 1000 runs':60s} {'ok' if ok else 'FAIL'}")
    if not ok:
        failures.append("codec -n 1000")
        print(proc.stdout[-1500:])
    print(f"{len(failures)} case(s) failed" if failures else "all cases passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
