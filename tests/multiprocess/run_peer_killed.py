#!/usr/bin/env python3
"""Starts two ranks of one of the worker's peer_killed scenarios by hand (argv[2], default
peer_killed): rank 1 kills itself after joining, rank 0 must report an ember::Error within the timeout and exit 0 (the worker checks the
message and the time), and rank 1 must have died of SIGKILL."""
import os
import signal
import socket
import subprocess
import sys


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    worker = sys.argv[1]
    scenario = sys.argv[2] if len(sys.argv) > 2 else "peer_killed"
    port = str(free_port())
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port, EMBER_TEST_TIMEOUT_MS="5000")
        procs.append(subprocess.Popen([worker, scenario], env=env))
    try:
        codes = [p.wait(timeout=60) for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        print("FAILED: a rank hung", file=sys.stderr)
        return 1
    print("exit codes:", codes)
    if codes[1] != -signal.SIGKILL:
        print("FAILED: rank 1 should have died of SIGKILL", file=sys.stderr)
        return 1
    if codes[0] != 0:
        print("FAILED: rank 0 did not report the lost peer as expected", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
