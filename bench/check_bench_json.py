#!/usr/bin/env python3
"""Checks benchmark JSON files (bench/ember_bench, framework "ember", and bench/torch_mlp.py,
framework "pytorch") against bench/schema/bench.schema.json, then checks what a schema cannot
express:

  - steps_per_s == 1e6 / us_per_step and us_per_step_min <= us_per_step <= us_per_step_max;
  - floor.flops and floor.bytes equal the brief's formula recomputed from the workload's layers
    and momentum and the row's batch (mode dynamic: the mean over the row's batch schedule),
    floor.us == 1e6 * max(flops / peak.flops_per_s, bytes / peak.bytes_per_s) and
    floor.share == floor.us / us_per_step;
  - every row's workload is a key of `workloads`; no two rows share (workload, batch, mode);
  - a row's loss_steps equals config.loss_steps (the losses of all modes come from N steps);
  - eager rows: loss_rel_diff_vs_eager is 0 or null (an eager run compared with itself);
  - dynamic rows: for framework ember, recompiles == 0 (the issue demands none after the first
    compile; null, not counted, fails too; PyTorch's count is reported as measured), and `batches` is the brief's schedule [B, B*3/4, B/2, B*3/4+1]
    (integer division, each clamped to >= 1);
  - mode cuda-graph only in framework pytorch (hand-captured graphs are PyTorch's mode).

Usage: check_bench_json.py FILE [FILE...] [--schema PATH]
Prints each violation with the row it is in and a one-line summary; exit status 0 when every
file passes, 1 when any violation was found, 2 when the checker itself cannot run.
Relative tolerance 1e-6 for derived figures (they are written as doubles, not rounded), 1e-9
for the floor's FLOP and byte counts (integers well inside a double's exact range).
"""
import argparse
import json
import os
import sys

REL_DERIVED = 1e-6
REL_COUNTS = 1e-9
DEFAULT_SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schema",
                              "bench.schema.json")


def optimizer_states(optimizer):
    """State tensors per parameter the update reads and writes: AdamW 2, SGD 1 with momentum."""
    if optimizer.get("name") == "adamw":
        return 2
    return 1 if optimizer.get("momentum", 0) > 0 else 0


def workload_cost(spec):
    """(macs per layer, activations, params, input, classes) per sample: from the spec's own
    counts (conv nets), else from its Linear layers."""
    layers = spec["layers"]
    if "macs" in spec:
        inp = 1
        for d in spec["input"]:
            inp *= d
        # A gpt sample is a sequence: one set of logits per token.
        classes = layers[-1] * inp if spec.get("arch") == "gpt" else layers[-1]
        return spec["macs"], spec["activations"], spec["params"], inp, classes
    pairs = list(zip(layers[:-1], layers[1:]))
    return ([i * o for i, o in pairs], sum(layers[1:-1]), sum(i * o + o for i, o in pairs),
            layers[0], layers[-1])


def floor_counts(spec, batch, states=None):
    """The brief's floor: GEMM FLOPs (no gradient for the input) and minimum bytes per step.
    `states` (optimizer_states) overrides what the momentum implies."""
    macs, acts, params, inp, classes = workload_cost(spec)
    m = states if states is not None else (1 if spec["optimizer"]["momentum"] > 0 else 0)
    # No gradient for the input's first product, except a gpt's (it reads the embeddings).
    first = 0 if spec.get("arch") == "gpt" else macs[0]
    flops = 6 * batch * sum(macs) - 2 * batch * first
    nbytes = 4 * (params * (5 + 2 * m) + batch * (2 * inp + 5 * acts + 4 * classes))
    return flops, nbytes


def row_floor_counts(spec, batch, mode, states=None):
    """A row's floor counts; mode dynamic: the mean over the schedule its steps cycle through."""
    batches = dynamic_schedule(batch) if mode == "dynamic" else [batch]
    counts = [floor_counts(spec, b, states) for b in batches]
    return (sum(c[0] for c in counts) / len(counts), sum(c[1] for c in counts) / len(counts))


def dynamic_schedule(batch):
    """The batch sizes a dynamic run cycles through, largest (the row's batch) first."""
    three_q = batch * 3 // 4
    return [max(1, b) for b in (batch, three_q, batch // 2, three_q + 1)]


def close(a, b, rel):
    return a == b or abs(a - b) <= rel * max(abs(a), abs(b))


def row_label(i, row):
    return "results[{}] ({}, batch {}, {})".format(i, row.get("workload"), row.get("batch"),
                                                   row.get("mode"))


def check_rows(doc):
    """Violations of the rules a schema cannot state; doc must already satisfy the schema."""
    out = []
    peak = doc["machine"]["peak"]
    seen = {}
    for i, row in enumerate(doc["results"]):
        where = row_label(i, row)

        def bad(msg):
            out.append("{}: {}".format(where, msg))

        key = (row["workload"], row["batch"], row["mode"], row.get("amp", "none"))
        if key in seen:
            bad("duplicate of results[{}]".format(seen[key]))
        else:
            seen[key] = i
        spec = doc["workloads"].get(row["workload"])
        if spec is None:
            bad("workload {!r} is not a key of workloads".format(row["workload"]))
        if row["mode"] == "cuda-graph" and doc["framework"] != "pytorch":
            bad("mode cuda-graph is PyTorch's (framework is {})".format(doc["framework"]))
        if "batches" in row:
            if row["mode"] != "dynamic":
                bad("batches is for mode dynamic only")
            elif row["batches"] != dynamic_schedule(row["batch"]):
                bad("batches {} is not the schedule {}".format(row["batches"],
                                                               dynamic_schedule(row["batch"])))
        if row["status"] != "ok":
            continue

        us = row["us_per_step"]
        if not close(row["steps_per_s"], 1e6 / us, REL_DERIVED):
            bad("steps_per_s {} != 1e6/us_per_step = {}".format(row["steps_per_s"], 1e6 / us))
        if not row["us_per_step_min"] <= us <= row["us_per_step_max"]:
            bad("us_per_step {} outside [min {}, max {}]".format(us, row["us_per_step_min"],
                                                                 row["us_per_step_max"]))
        if row["loss_steps"] != doc["config"]["loss_steps"]:
            bad("loss_steps {} != config.loss_steps {}".format(row["loss_steps"],
                                                               doc["config"]["loss_steps"]))
        if row["mode"] == "eager" and row["loss_rel_diff_vs_eager"] not in (0, None):
            bad("eager loss_rel_diff_vs_eager is {}, want 0 or null".format(
                row["loss_rel_diff_vs_eager"]))
        # The zero-recompile rule is Ember's promise (issue 6); PyTorch's count is a measurement
        # reported as it is.
        if row["mode"] == "dynamic":
            if doc["framework"] != "ember":
                pass
            elif row["recompiles"] is None:
                bad("recompiles not counted (null); the issue demands 0")
            elif row["recompiles"] != 0:
                bad("{} recompiles after the first compile; the issue demands 0".format(
                    row["recompiles"]))
            if "batches" not in row:
                bad("dynamic row without its batches schedule")

        fl = row["floor"]
        if spec is not None:
            want_f, want_b = row_floor_counts(spec, row["batch"], row["mode"],
                                              optimizer_states(spec["optimizer"]))
            if not close(fl["flops"], want_f, REL_COUNTS):
                bad("floor.flops {} != formula {}".format(fl["flops"], want_f))
            if not close(fl["bytes"], want_b, REL_COUNTS):
                bad("floor.bytes {} != formula {}".format(fl["bytes"], want_b))
        want_us = 1e6 * max(fl["flops"] / peak["flops_per_s"], fl["bytes"] / peak["bytes_per_s"])
        if not close(fl["us"], want_us, REL_DERIVED):
            bad("floor.us {} != 1e6*max(flops/peak, bytes/peak) = {}".format(fl["us"], want_us))
        if not close(fl["share"], fl["us"] / us, REL_DERIVED):
            bad("floor.share {} != floor.us/us_per_step = {}".format(fl["share"], fl["us"] / us))
    return out


def check_document(doc, validator):
    """All violations of one parsed document. The arithmetic checks run only on a document the
    schema accepts (they rely on its types and required fields), so a document with schema
    errors gets only those."""
    errors = sorted(validator.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        out = []
        for e in errors:
            path = "/".join(str(p) for p in e.absolute_path) or "(top level)"
            label = path
            if len(e.absolute_path) >= 2 and e.absolute_path[0] == "results":
                idx = e.absolute_path[1]
                if isinstance(idx, int) and idx < len(doc["results"]) \
                        and isinstance(doc["results"][idx], dict):
                    label = "{} at {}".format(row_label(idx, doc["results"][idx]), path)
            out.append("schema: {}: {}".format(label, e.message))
        return out
    return check_rows(doc)


def cannot_run(msg):
    print("check_bench_json: " + msg, file=sys.stderr)
    sys.exit(2)


def load_validator(schema_path):
    try:
        import jsonschema
    except ImportError:
        cannot_run("the jsonschema module is missing (Debian: apt-get install python3-jsonschema)")
    try:
        with open(schema_path, encoding="utf-8") as f:
            schema = json.load(f)
    except (OSError, ValueError) as e:
        cannot_run("cannot read schema {}: {}".format(schema_path, e))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", metavar="FILE")
    ap.add_argument("--schema", default=DEFAULT_SCHEMA, help="default: %(default)s")
    args = ap.parse_args(argv)
    validator = load_validator(args.schema)

    total, failed_files, rows = 0, 0, 0
    for path in args.files:
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            problems = ["cannot read: {}".format(e)]
        else:
            problems = check_document(doc, validator)
            if isinstance(doc, dict) and isinstance(doc.get("results"), list):
                rows += len(doc["results"])
        for p in problems:
            print("{}: {}".format(path, p))
        if any(p.startswith("schema: ") for p in problems):
            print("{}: (arithmetic checks skipped until the schema errors are fixed)".format(path))
        total += len(problems)
        failed_files += bool(problems)
    print("check_bench_json: {} file(s), {} row(s), {} violation(s){}".format(
        len(args.files), rows, total,
        " in {} file(s)".format(failed_files) if total else ""))
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
