#!/usr/bin/env python3
"""Tests the parts of bench/torch_mlp.py that need no torch: the document it assembles from
measurements (here made up) must pass bench/check_bench_json.py, merging runs made in parts
must too, and --help must work where torch is not installed.

Run: python3 tests/bench/test_torch_mlp_assembly.py  (exit 77 = skipped: no jsonschema module)
"""
import copy
import importlib.util
import os
import subprocess
import sys
import unittest

sys.dont_write_bytecode = True  # loading the scripts must not leave __pycache__ in the source tree

try:
    import jsonschema  # noqa: F401
except ImportError:
    print("SKIP: the jsonschema module is missing (Debian: python3-jsonschema)")
    sys.exit(77)

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SCRIPT = os.path.join(ROOT, "bench", "torch_mlp.py")


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


tm = load("torch_mlp", SCRIPT)
cbj = load("check_bench_json", os.path.join(ROOT, "bench", "check_bench_json.py"))

PEAK = {"flops_per_s": 5.0e13, "bytes_per_s": 4.0e12, "how": "made up"}
MACHINE = {"hostname": "h", "os": "Linux", "cpu": "x86", "device": "cuda:0",
           "device_name": "NVIDIA H200", "driver_version": "580.1", "cuda_version": "13.0",
           "compiler": "Python 3.12.3", "peak": PEAK}
CONFIG = {"warmup": 50, "steps": 100, "repeats": 11, "seed": 0, "tf32": False,
          "loss_steps": 100}


def fake_measurement(us, loss, recompiles):
    # 11 samples around us; the median is the middle one
    samples = [us * (1 + 0.01 * k) for k in (-5, 3, -1, 0, 2, -2, 4, 1, -3, 5, -4)]
    return {"samples_us": samples, "loss": loss, "recompiles": recompiles,
            "peak_memory_bytes": 50 * 2**20, "kernels_per_step": 21.0}


def fake_rows(workloads, batches, peak=PEAK):
    rows = []
    for w in workloads:
        for b in batches:
            ref = 2.3 + b * 1e-5
            rows.append(tm.ok_row(w, b, "eager", fake_measurement(200.0, ref, None), peak,
                                  (900.0, 880.0), 100, ref))
            rows.append(tm.ok_row(w, b, "default", fake_measurement(120.0, ref * (1 + 1e-7), 0),
                                  peak, (30000.0, 5000.0), 100, ref))
            rows.append(tm.ok_row(w, b, "dynamic", fake_measurement(150.0, ref * 0.999, 0),
                                  peak, (None, None), 100, ref * 0.999))
            rows.append(tm.ok_row(w, b, "cuda-graph", fake_measurement(60.0, ref, None), peak,
                                  (950.0, 940.0), 100, ref))
            rows.append(tm.failed_row(w, b, "max-autotune", "error",
                                      "InductorError: made up\nsecond line"))
            rows.append(tm.failed_row(w, b, "reduce-overhead", "skipped", "not this time"))
    return rows


def fake_document(workloads=("mlp", "deep_mlp"), batches=(64, 1024), peak=PEAK):
    machine = dict(MACHINE, peak=dict(peak))
    return tm.make_document("2.11.0+cu130", machine, dict(CONFIG), list(workloads),
                            fake_rows(workloads, batches, peak), "python3 bench/torch_mlp.py",
                            created="2026-11-30T10:00:00Z")


class TorchMlpAssembly(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.validator = cbj.load_validator(cbj.DEFAULT_SCHEMA)

    def assertValid(self, doc):
        self.assertEqual(cbj.check_document(doc, self.validator), [])

    def test_document_passes_the_checker(self):
        doc = fake_document()
        self.assertValid(doc)
        self.assertEqual(len(doc["results"]), 2 * 2 * 6)

    def test_row_figures(self):
        row = fake_document()["results"][0]
        self.assertAlmostEqual(row["us_per_step"], 200.0)        # the median sample
        self.assertAlmostEqual(row["us_per_step_min"], 190.0)
        self.assertAlmostEqual(row["us_per_step_max"], 210.0)
        self.assertEqual(row["loss_rel_diff_vs_eager"], 0.0)
        # mlp at batch 64: 64 * 1,636,352 FLOP (bench/NOTES.md)
        self.assertEqual(row["floor"]["flops"], 64 * 1636352)
        dyn = [r for r in fake_document()["results"] if r["mode"] == "dynamic"][0]
        self.assertEqual(dyn["batches"], [64, 48, 32, 49])

    def test_schedule_clamps_small_batches(self):
        self.assertEqual(tm.dynamic_schedule(1), [1, 1, 1, 1])
        self.assertEqual(tm.dynamic_schedule(2), [2, 1, 1, 2])
        self.assertEqual(tm.dynamic_schedule(8192), [8192, 6144, 4096, 6145])

    def test_rel_diff(self):
        self.assertAlmostEqual(tm.rel_diff(2.2, 2.0), 0.1)
        self.assertIsNone(tm.rel_diff(1.0, 0.0))
        self.assertIsNone(tm.rel_diff(1.0, None))

    def test_checker_sees_a_broken_assembly(self):
        doc = fake_document()
        doc["results"][1]["floor"]["share"] *= 2
        self.assertTrue(cbj.check_document(doc, self.validator))

    def test_merge_of_runs_made_in_parts(self):
        a = fake_document(workloads=("mlp",))
        other_peak = dict(PEAK, flops_per_s=4.0e13)
        b = fake_document(workloads=("deep_mlp",), peak=other_peak)
        merged = tm.merge_documents([a, b])
        self.assertValid(merged)  # every floor now against the first file's peak
        self.assertEqual(set(merged["workloads"]), {"mlp", "deep_mlp"})
        self.assertEqual(len(merged["results"]), len(a["results"]) + len(b["results"]))
        self.assertFalse(cbj.check_document(b, self.validator))  # b alone is consistent too
        with self.assertRaises(ValueError):
            tm.merge_documents([a, copy.deepcopy(a)])             # the same rows twice
        c = fake_document(workloads=("deep_mlp",))
        c["config"]["tf32"] = True
        with self.assertRaises(ValueError):
            tm.merge_documents([a, c])

    def test_table_lists_every_row(self):
        rows = fake_document()["results"]
        text = tm.format_table(rows)
        self.assertEqual(len(text.splitlines()), 1 + len(rows))
        self.assertIn("error: InductorError: made up", text)
        self.assertNotIn("second line", text)

    def test_help_and_bad_options_without_torch(self):
        r = subprocess.run([sys.executable, SCRIPT, "--help"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("--first-step-modes", r.stdout)
        r = subprocess.run([sys.executable, SCRIPT, "--modes", "eager,fast"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown mode 'fast'", r.stderr)


if __name__ == "__main__":
    unittest.main()
