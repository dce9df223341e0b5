#!/usr/bin/env python3
"""Tests bench/check_bench_json.py: a document built by hand here (its floor worked out GEMM by
GEMM below, not with the checker's formula) must pass, and each broken copy must fail.

Run: python3 tests/bench/test_check_bench_json.py  (exit 77 = skipped: no jsonschema module)
"""
import copy
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # loading the scripts must not leave __pycache__ in the source tree

try:
    import jsonschema  # noqa: F401  (the checker needs it; without it there is nothing to test)
except ImportError:
    print("SKIP: the jsonschema module is missing (Debian: python3-jsonschema)")
    sys.exit(77)

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CHECKER = os.path.join(ROOT, "bench", "check_bench_json.py")
SCHEMA = os.path.join(ROOT, "bench", "schema", "bench.schema.json")

_spec = importlib.util.spec_from_file_location("check_bench_json", CHECKER)
cbj = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cbj)

PEAK_FLOPS = 50.0e12
PEAK_BYTES = 4.0e12


def floor_by_hand(layers, momentum, batch):
    """FLOPs: for each Linear(i, o) the forward GEMM, the weight-gradient GEMM, and the
    input-gradient GEMM except for the first layer (the input needs no gradient), 2*B*i*o each.
    Bytes: parameters read by the forward, gradient written, then read + param read + written
    by SGD (5 passes, 7 with a momentum buffer read and written); per sample the input read
    twice, every hidden activation touched five times, the logits four times; 4 bytes each."""
    flops = 0
    params = 0
    for k, (i, o) in enumerate(zip(layers[:-1], layers[1:])):
        gemms = 2 if k == 0 else 3
        flops += gemms * 2 * batch * i * o
        params += i * o + o
    passes = 7 if momentum else 5
    per_sample = 2 * layers[0] + 4 * layers[-1]
    for width in layers[1:-1]:
        per_sample += 5 * width
    return flops, 4 * (passes * params + batch * per_sample)


def ok_row(workloads, workload, batch, mode, us, loss, rel, recompiles):
    spec = workloads[workload]
    if mode == "dynamic":
        # The mean over the schedule the steps cycle through: written out for batch 64 only.
        assert batch == 64
        both = [floor_by_hand(spec["layers"], spec["optimizer"]["momentum"], b)
                for b in (64, 48, 32, 49)]
        flops, nbytes = (sum(x[0] for x in both) / 4, sum(x[1] for x in both) / 4)
    else:
        flops, nbytes = floor_by_hand(spec["layers"], spec["optimizer"]["momentum"], batch)
    floor_us = 1e6 * max(flops / PEAK_FLOPS, nbytes / PEAK_BYTES)
    return {
        "workload": workload, "batch": batch, "mode": mode, "status": "ok",
        "us_per_step": us, "steps_per_s": 1e6 / us,
        "us_per_step_min": us * 0.97, "us_per_step_max": us * 1.05,
        "first_step_ms": {"cold": 1500.0, "warm": 300.0},
        "peak_memory_bytes": 12345678, "kernels_per_step": 23.0,
        "loss": loss, "loss_steps": 100, "loss_rel_diff_vs_eager": rel,
        "recompiles": recompiles,
        "floor": {"flops": flops, "bytes": nbytes, "us": floor_us, "share": floor_us / us},
    }


def valid_document():
    workloads = {
        "mlp": {"layers": [784, 512, 10], "activation": "relu", "loss": "cross_entropy",
                "optimizer": {"name": "sgd", "lr": 0.01, "momentum": 0.0}},
        "deep_mlp": {"layers": [784, 1024, 1024, 1024, 1024, 10], "activation": "gelu",
                     "loss": "cross_entropy",
                     "optimizer": {"name": "sgd", "lr": 0.01, "momentum": 0.9}},
    }
    dyn = ok_row(workloads, "mlp", 64, "dynamic", 150.0, 2.21, 1e-7, 0)
    dyn["batches"] = [64, 48, 32, 49]
    rows = [
        ok_row(workloads, "mlp", 64, "eager", 200.0, 2.2, 0.0, None),
        ok_row(workloads, "mlp", 64, "default", 120.0, 2.2000001, 4.5e-8, 0),
        ok_row(workloads, "mlp", 64, "cuda-graph", 60.0, 2.2, 0.0, None),
        dyn,
        ok_row(workloads, "deep_mlp", 1024, "eager", 900.0, 2.3, None, None),
        {"workload": "deep_mlp", "batch": 1024, "mode": "max-autotune", "status": "error",
         "error": "InductorError: something broke"},
        {"workload": "deep_mlp", "batch": 1024, "mode": "reduce-overhead", "status": "skipped",
         "error": "not on this device"},
    ]
    return {
        "schema_version": 1, "framework": "pytorch", "framework_version": "2.11.0",
        "created": "2026-11-30T10:00:00Z", "command": "python3 bench/torch_mlp.py",
        "machine": {"hostname": "h", "os": "Linux", "cpu": "x86", "device": "cuda:0",
                    "device_name": "NVIDIA H200", "driver_version": "580.1",
                    "cuda_version": "13.0", "compiler": "Python 3.12",
                    "peak": {"flops_per_s": PEAK_FLOPS, "bytes_per_s": PEAK_BYTES,
                             "how": "by hand"}},
        "config": {"warmup": 50, "steps": 100, "repeats": 11, "seed": 0, "tf32": False,
                   "loss_steps": 100},
        "timing": "host wall clock",
        "workloads": workloads,
        "results": rows,
    }


class CheckBenchJson(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.validator = cbj.load_validator(SCHEMA)

    def problems(self, doc):
        return cbj.check_document(doc, self.validator)

    def assertFails(self, doc, *needles):
        found = self.problems(doc)
        self.assertTrue(found, "the checker accepted a broken document")
        text = "\n".join(found)
        for n in needles:
            self.assertIn(n, text)

    def test_hand_built_floor_matches_the_notes(self):
        # bench/NOTES.md counts the seed MLP at 1,636,352 FLOP per sample.
        self.assertEqual(floor_by_hand([784, 512, 10], 0.0, 1)[0], 1636352)

    def test_valid_document_passes(self):
        self.assertEqual(self.problems(valid_document()), [])

    def test_bad_steps_per_s(self):
        doc = valid_document()
        doc["results"][1]["steps_per_s"] *= 1.01
        self.assertFails(doc, "results[1]", "steps_per_s")

    def test_median_outside_min_max(self):
        doc = valid_document()
        doc["results"][0]["us_per_step_min"] = 201.0
        self.assertFails(doc, "results[0]", "outside")

    def test_wrong_floor_flops(self):
        doc = valid_document()
        doc["results"][4]["floor"]["flops"] += 2 * 1024  # as if one more input column
        self.assertFails(doc, "results[4]", "floor.flops")

    def test_wrong_floor_bytes_momentum_ignored(self):
        doc = valid_document()
        spec = doc["workloads"]["deep_mlp"]
        _, no_momentum = floor_by_hand(spec["layers"], 0.0, 1024)
        doc["results"][4]["floor"]["bytes"] = no_momentum
        self.assertFails(doc, "results[4]", "floor.bytes")

    def test_wrong_floor_us_and_share(self):
        doc = valid_document()
        doc["machine"]["peak"]["flops_per_s"] *= 2  # floors now computed against another peak
        self.assertFails(doc, "floor.us")
        doc = valid_document()
        doc["results"][2]["floor"]["share"] *= 1.5
        self.assertFails(doc, "results[2]", "floor.share")

    def test_duplicate_row(self):
        doc = valid_document()
        doc["results"].append(copy.deepcopy(doc["results"][1]))
        self.assertFails(doc, "duplicate of results[1]")

    def test_nonzero_or_uncounted_dynamic_recompiles(self):
        doc = valid_document()
        doc["framework"], doc["framework_version"] = "ember", "0.1.0"  # Ember's promise
        doc["results"][2]["mode"] = "reduce-overhead"  # cuda-graph is PyTorch's mode only
        self.assertEqual(self.problems(doc), [])
        doc["results"][3]["recompiles"] = 1
        self.assertFails(doc, "results[3]", "recompiles")
        doc["results"][3]["recompiles"] = None
        self.assertFails(doc, "results[3]", "recompiles")

    def test_pytorch_dynamic_recompiles_are_reported_not_failed(self):
        doc = valid_document()
        doc["results"][3]["recompiles"] = 2
        doc["framework"] = "pytorch"
        doc["framework_version"] = "2.11.0"
        self.assertEqual(self.problems(doc), [])

    def test_dynamic_floor_is_the_schedule_mean(self):
        doc = valid_document()
        spec = doc["workloads"]["mlp"]
        flops, nbytes = floor_by_hand(spec["layers"], spec["optimizer"]["momentum"], 64)
        doc["results"][3]["floor"]["flops"] = flops  # the largest batch's, not the mean
        self.assertFails(doc, "results[3]", "floor.flops")

    def test_dynamic_schedule(self):
        doc = valid_document()
        doc["results"][3]["batches"] = [64, 48, 32, 48]
        self.assertFails(doc, "results[3]", "schedule")
        del doc["results"][3]["batches"]
        self.assertFails(doc, "results[3]", "batches")

    def test_eager_compared_with_itself(self):
        doc = valid_document()
        doc["results"][0]["loss_rel_diff_vs_eager"] = 0.01
        self.assertFails(doc, "results[0]", "loss_rel_diff_vs_eager")

    def test_unknown_workload(self):
        doc = valid_document()
        doc["results"][5]["workload"] = "wide_mlp"
        self.assertFails(doc, "results[5]", "not a key of workloads")

    def test_cuda_graph_only_for_pytorch(self):
        doc = valid_document()
        doc["framework"] = "ember"
        self.assertFails(doc, "results[2]", "cuda-graph")

    def test_loss_steps_differs_from_config(self):
        doc = valid_document()
        doc["config"]["loss_steps"] = 20
        self.assertFails(doc, "loss_steps")

    def test_missing_required_field(self):
        doc = valid_document()
        del doc["results"][1]["loss"]
        self.assertFails(doc, "schema:", "results[1]", "'loss' is a required property")

    def test_error_row_without_message(self):
        doc = valid_document()
        del doc["results"][5]["error"]
        self.assertFails(doc, "schema:", "'error' is a required property")

    def test_wrong_schema_version(self):
        doc = valid_document()
        doc["schema_version"] = 2
        self.assertFails(doc, "schema:", "schema_version")

    def test_command_line_exit_status(self):
        with tempfile.TemporaryDirectory() as d:
            good = os.path.join(d, "good.json")
            bad = os.path.join(d, "bad.json")
            with open(good, "w") as f:
                json.dump(valid_document(), f)
            doc = valid_document()
            doc["results"][1]["steps_per_s"] = 1.0
            with open(bad, "w") as f:
                json.dump(doc, f)
            run = [sys.executable, CHECKER, "--schema", SCHEMA]
            r = subprocess.run(run + [good], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("0 violation(s)", r.stdout)
            r = subprocess.run(run + [good, bad], capture_output=True, text=True)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("bad.json: results[1] (mlp, batch 64, default): steps_per_s", r.stdout)
            self.assertNotIn("good.json:", r.stdout)
            with open(bad, "w") as f:
                f.write("{not json")
            r = subprocess.run(run + [bad], capture_output=True, text=True)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
