#!/usr/bin/env python3
"""Checks the ember-run launcher from the outside, with small `sh -c` ranks.

    test_ember_run.py <path to ember-run>

What a training job relies on: every rank's environment, arguments passed through untouched,
the exit code, a failing rank taking the others down (SIGKILL for those that ignore SIGTERM),
signals to the launcher reaching the ranks, and bad usage refused with exit code 2. Every rank
that sleeps writes its pid so the test can check that nothing outlives the launcher.
"""
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

EMBER_RUN = None  # set from argv in main
TIMEOUT_S = 30  # far above what any case needs: a hang fails instead of blocking ctest

RANK_VARIABLES = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                  "MASTER_PORT", "GROUP_RANK", "ROLE_RANK"]

# Writes a file in one step, so the test never reads one half written.
WRITE_PID = 'echo $$ > "$DIR/pid_$RANK.tmp" && mv "$DIR/pid_$RANK.tmp" "$DIR/pid_$RANK"; '


def reset_signals():
    # The launcher decides from its own dispositions what to forward; a test run from a shell
    # that ignores some of them (nohup, `&`) must not change what is tested.
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(number, signal.SIG_DFL)


def is_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie answers kill(0) until its parent (init, for an orphan) reaps it; it is dead.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class EmberRunTest(unittest.TestCase):
    def setUp(self):
        self._dir = tempfile.TemporaryDirectory(prefix="ember_run_test_")
        self.dir = self._dir.name
        self.launchers = []

    def tearDown(self):
        # A failed check must not leave ranks behind: killing the launcher takes them along
        # (PR_SET_PDEATHSIG), and any pid a rank wrote is killed by hand too.
        for launcher in self.launchers:
            if launcher.poll() is None:
                launcher.kill()
                launcher.wait()
        for pid in self.pids_written():
            if is_alive(pid):
                os.kill(pid, signal.SIGKILL)
        self._dir.cleanup()

    def start(self, *args, env=None):
        full_env = dict(os.environ, DIR=self.dir, **(env or {}))
        launcher = subprocess.Popen([EMBER_RUN, *args], env=full_env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, preexec_fn=reset_signals)
        self.launchers.append(launcher)
        return launcher

    def run_launcher(self, *args, env=None):
        """(exit code, stdout, stderr, seconds it ran)"""
        began = time.monotonic()
        launcher = self.start(*args, env=env)
        stdout, stderr = launcher.communicate(timeout=TIMEOUT_S)
        return launcher.returncode, stdout, stderr, time.monotonic() - began

    def path(self, name):
        return os.path.join(self.dir, name)

    def wait_for_files(self, names, launcher=None):
        deadline = time.monotonic() + TIMEOUT_S
        while not all(os.path.exists(self.path(name)) for name in names):
            if launcher is not None and launcher.poll() is not None:
                self.fail(f"ember-run exited ({launcher.returncode}) before {names} appeared: "
                          f"{launcher.stderr.read()}")
            self.assertLess(time.monotonic(), deadline, f"{names} never appeared")
            time.sleep(0.02)

    def read_pid(self, name):
        with open(self.path(name)) as file:
            return int(file.read())

    def pids_written(self):
        pids = []
        for name in os.listdir(self.dir) if os.path.isdir(self.dir) else []:
            if name.startswith("pid_") and not name.endswith(".tmp"):
                try:
                    pids.append(self.read_pid(name))
                except (OSError, ValueError):
                    pass
        return pids

    def assert_dead(self, pid, within_s=0.0):
        """Direct ranks are reaped by the launcher; a rank's own children are orphans reaped by
        init, so those get a moment."""
        deadline = time.monotonic() + within_s
        while is_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertFalse(is_alive(pid), f"pid {pid} outlived ember-run")

    def rank_environments(self, *launcher_args, env=None):
        script = "".join(f'echo "{name}=${name}" >> "$DIR/env_$RANK.tmp"; '
                         for name in RANK_VARIABLES)
        script += 'mv "$DIR/env_$RANK.tmp" "$DIR/env_$RANK"'
        code, _, stderr, _ = self.run_launcher(*launcher_args, "sh", "-c", script, env=env)
        self.assertEqual(code, 0, stderr)
        environments = {}
        for name in os.listdir(self.dir):
            if name.startswith("env_") and not name.endswith(".tmp"):
                with open(self.path(name)) as file:
                    environments[int(name[4:])] = dict(line.split("=", 1)
                                                       for line in file.read().splitlines())
        return environments

    # --- environment and arguments ------------------------------------------------------------

    def test_environment_defaults(self):
        # A RANK in the launcher's environment must not leak into (or be duplicated for) ranks.
        environments = self.rank_environments("--nproc-per-node", "3", env={"RANK": "99"})
        self.assertEqual(sorted(environments), [0, 1, 2])
        for rank, environment in environments.items():
            self.assertEqual(environment, {
                "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "3",
                "LOCAL_WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
                "GROUP_RANK": "0", "ROLE_RANK": str(rank)})

    def test_single_rank_by_default(self):
        environments = self.rank_environments()
        self.assertEqual(sorted(environments), [0])
        self.assertEqual(environments[0]["WORLD_SIZE"], "1")

    def test_free_port_is_picked_once_for_all_ranks(self):
        environments = self.rank_environments("--nproc-per-node", "3", "--master-port", "0")
        ports = {environment["MASTER_PORT"] for environment in environments.values()}
        self.assertEqual(len(ports), 1, ports)
        self.assertTrue(1 <= int(ports.pop()) <= 65535)

    def test_equals_forms(self):
        environments = self.rank_environments("--nproc-per-node=2", "--master-port=1234",
                                              "--master-addr=localhost", "--grace-s=3")
        self.assertEqual(sorted(environments), [0, 1])
        for environment in environments.values():
            self.assertEqual(environment["MASTER_PORT"], "1234")
            self.assertEqual(environment["MASTER_ADDR"], "localhost")
            self.assertEqual(environment["WORLD_SIZE"], "2")

    def test_torchrun_underscore_spelling(self):
        environments = self.rank_environments("--nproc_per_node", "2")
        self.assertEqual(sorted(environments), [0, 1])

    def test_arguments_after_program_belong_to_it(self):
        script = 'printf "%s\\n" "$@" > "$DIR/args_$RANK"'
        passed = ["--nproc-per-node", "5", "--", "--bogus", "-h", "a b"]
        code, _, stderr, _ = self.run_launcher("--nproc-per-node", "2", "sh", "-c", script, "sh",
                                               *passed)
        self.assertEqual(code, 0, stderr)
        for rank in (0, 1):
            with open(self.path(f"args_{rank}")) as file:
                self.assertEqual(file.read().splitlines(), passed)
        self.assertFalse(os.path.exists(self.path("args_2")))

    def test_double_dash_ends_options(self):
        # After `--`, even an option-looking word is PROG: here a script named like an option.
        script = "--looks-like-an-option"
        with open(self.path(script), "w") as file:
            file.write('#!/bin/sh\necho "$RANK $1" > "$DIR/ran_$RANK"\n')
        os.chmod(self.path(script), 0o755)
        code, _, stderr, _ = self.run_launcher("--nproc-per-node", "2", "--", script, "x",
                                               env={"PATH": self.dir + ":" + os.environ["PATH"]})
        self.assertEqual(code, 0, stderr)
        for rank in (0, 1):
            with open(self.path(f"ran_{rank}")) as file:
                self.assertEqual(file.read().strip(), f"{rank} x")

    # --- exit codes and teardown --------------------------------------------------------------

    def test_every_rank_succeeds(self):
        code, _, stderr, _ = self.run_launcher("--nproc-per-node", "4", "sh", "-c", "exit 0")
        self.assertEqual(code, 0, stderr)
        self.assertEqual(stderr, "")

    def test_late_failure_after_others_succeeded(self):
        # Ranks that finish cleanly early do not stop the job; a later failure still counts.
        script = 'if [ "$RANK" = 1 ]; then sleep 0.3; exit 5; fi'
        code, _, stderr, _ = self.run_launcher("--nproc-per-node", "3", "sh", "-c", script)
        self.assertEqual(code, 5, stderr)
        self.assertIn("rank 1 ", stderr)

    def test_failing_rank_stops_the_others(self):
        # Rank 1 is the sleeping process itself; rank 2 is a shell whose sleep is its child,
        # which must go too. Rank 0 fails once both have written their pids (rank 2 its child's
        # first).
        script = ('if [ "$RANK" = 0 ]; then '
                  '  while [ ! -e "$DIR/pid_1" ] || [ ! -e "$DIR/pid_2" ]; do sleep 0.02; done;'
                  '  exit 3; '
                  'fi; '
                  'if [ "$RANK" = 1 ]; then ' + WRITE_PID + 'exec sleep 60; fi; '
                  'sleep 60 & echo $! > "$DIR/pid_child.tmp" && '
                  'mv "$DIR/pid_child.tmp" "$DIR/pid_child"; ' +
                  WRITE_PID + 'wait')
        code, _, stderr, elapsed = self.run_launcher("--nproc-per-node", "3", "sh", "-c", script)
        self.assertEqual(code, 3, stderr)
        self.assertLess(elapsed, 5)
        self.assertIn("rank 0 (pid ", stderr)
        self.assertIn("exited with code 3", stderr)
        self.assert_dead(self.read_pid("pid_1"))
        self.assert_dead(self.read_pid("pid_2"))
        self.assert_dead(self.read_pid("pid_child"), within_s=2)

    def test_rank_ignoring_sigterm_is_killed_after_grace(self):
        script = ('if [ "$RANK" = 0 ]; then '
                  '  while [ ! -e "$DIR/pid_1" ]; do sleep 0.02; done; exit 1; '
                  'fi; '
                  "trap '' TERM; " + WRITE_PID + 'sleep 60')
        code, _, stderr, elapsed = self.run_launcher("--nproc-per-node", "2", "--grace-s", "1",
                                                     "sh", "-c", script)
        self.assertEqual(code, 1, stderr)
        self.assertGreater(elapsed, 0.9, "SIGKILL came before the grace period was over")
        self.assertLess(elapsed, 5)
        self.assertIn("SIGKILL", stderr)
        self.assert_dead(self.read_pid("pid_1"))

    def test_rank_killed_by_signal(self):
        script = 'if [ "$RANK" = 1 ]; then kill -KILL $$; fi; exec sleep 60'
        code, _, stderr, elapsed = self.run_launcher("--nproc-per-node", "2", "sh", "-c", script)
        self.assertEqual(code, 128 + 9, stderr)
        self.assertLess(elapsed, 5)
        self.assertIn("rank 1 (pid ", stderr)
        self.assertIn("killed by signal SIGKILL (9)", stderr)

    # --- signals to the launcher --------------------------------------------------------------

    def check_signal_reaches_ranks(self, signal_number, name):
        # `sleep & wait`: sh runs a trap at once during `wait`, and between commands, whereas a
        # signal that lands just before a foreground sleep starts would wait for the sleep.
        script = (f"trap 'echo got > \"$DIR/got_$RANK\"; kill $! 2>/dev/null; "
                  f"exit {128 + signal_number}' {name}; " + WRITE_PID + "sleep 60 & wait")
        began = time.monotonic()
        launcher = self.start("--nproc-per-node", "2", "sh", "-c", script)
        self.wait_for_files(["pid_0", "pid_1"], launcher)
        launcher.send_signal(signal_number)
        _, stderr = launcher.communicate(timeout=TIMEOUT_S)
        self.assertEqual(launcher.returncode, 128 + signal_number, stderr)
        self.assertLess(time.monotonic() - began, 5)
        self.assertIn(f"SIG{name}", stderr)
        for rank in (0, 1):
            self.assertTrue(os.path.exists(self.path(f"got_{rank}")), f"rank {rank}: no {name}")
            self.assert_dead(self.read_pid(f"pid_{rank}"))

    def test_sigterm_is_forwarded(self):
        self.check_signal_reaches_ranks(signal.SIGTERM, "TERM")

    def test_sigint_is_forwarded(self):
        self.check_signal_reaches_ranks(signal.SIGINT, "INT")

    # --- bad usage ----------------------------------------------------------------------------

    def test_bad_usage(self):
        cases = [
            (["--nproc-per-node", "0", "true"], "--nproc-per-node"),
            (["--nproc-per-node", "x", "true"], "--nproc-per-node"),
            (["--nproc-per-node", "1025", "true"], "--nproc-per-node"),
            (["--nproc-per-node=", "true"], "--nproc-per-node"),
            (["--nproc-per-node"], "--nproc-per-node"),
            (["--master-port", "65536", "true"], "--master-port"),
            (["--master-port", "-1", "true"], "--master-port"),
            (["--grace-s", "1.5", "true"], "--grace-s"),
            (["--master-addr=", "true"], "--master-addr"),
            (["--bogus", "true"], "--bogus"),
            ([], "PROG"),
            (["--nproc-per-node", "2"], "PROG"),
        ]
        for args, mentioned in cases:
            with self.subTest(args=args):
                code, stdout, stderr, _ = self.run_launcher(*args)
                self.assertEqual(code, 2, stderr)
                self.assertIn(mentioned, stderr)
                self.assertIn("usage:", stderr)
                self.assertEqual(stdout, "")

    def test_help(self):
        for flag in ("--help", "-h"):
            code, stdout, stderr, _ = self.run_launcher(flag)
            self.assertEqual(code, 0, stderr)
            self.assertIn("usage: ember-run", stdout)

    def test_program_that_does_not_exist(self):
        for program in ("ember-run-test-no-such-program", self.path("missing")):
            with self.subTest(program=program):
                code, _, stderr, elapsed = self.run_launcher("--nproc-per-node", "2", program)
                self.assertEqual(code, 127, stderr)
                self.assertIn(f"cannot run {program}", stderr)
                self.assertLess(elapsed, 5)


def main():
    global EMBER_RUN
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    EMBER_RUN = os.path.abspath(sys.argv[1])
    unittest.main(argv=[sys.argv[0]], verbosity=1)


if __name__ == "__main__":
    main()
