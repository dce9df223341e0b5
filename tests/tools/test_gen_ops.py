#!/usr/bin/env python3
"""tools/gen_ops.py refuses a broken op table, naming the row and the mistake.

Each case takes the real core/ops.yaml, makes one mistake a contributor could make, and runs the
generator on it: it must exit 1 with the row and the reason in its message, and write nothing.
The real table must generate. Exit 77 (skipped) without PyYAML.
"""
import copy
import os
import subprocess
import sys
import tempfile

try:
    import yaml
except ImportError:
    print("test_gen_ops: PyYAML missing (scripts/setup.sh installs python3-yaml)")
    sys.exit(77)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GEN = os.path.join(ROOT, "tools", "gen_ops.py")
TABLE = os.path.join(ROOT, "core", "ops.yaml")


def run(data):
    """(exit code, stderr, files written) of the generator on `data`."""
    with tempfile.TemporaryDirectory(prefix="gen_ops_test_") as tmp:
        src = os.path.join(tmp, "ops.yaml")
        out = os.path.join(tmp, "out")
        with open(src, "w") as f:
            yaml.safe_dump(data, f)
        r = subprocess.run([sys.executable, GEN, src, out], capture_output=True, text=True)
        written = sum(len(files) for _, _, files in os.walk(out)) if os.path.isdir(out) else 0
        return r.returncode, r.stderr, written


def mutated(base, change):
    data = copy.deepcopy(base)
    change(data)
    return data


def set_row(name, **fields):
    def change(d):
        d["ops"][name].update(fields)
    return change


def drop_key(name, key):
    def change(d):
        del d["ops"][name][key]
    return change


# (what the case is, the change, substrings the message must contain)
CASES = [
    ("an unknown top-level key", lambda d: d.update(operators={}), ["unknown top-level key"]),
    ("an unknown kind", set_row("relu", kind="Elementwise"), ["relu", "unknown kind"]),
    ("a Binary op of arity 1", set_row("add", arity=1), ["add", "arity 2"]),
    ("an undeclared attribute", set_row("relu", attrs=["steepness"]),
     ["relu", "'steepness' is not declared"]),
    ("a pointwise op with both functor and fwd", set_row("relu", fwd="x"),
     ["relu", "exactly one of 'functor' and 'fwd'"]),
    ("a pointwise op with neither", drop_key("relu", "functor"),
     ["relu", "exactly one of 'functor' and 'fwd'"]),
    ("a differentiable op without a backward", drop_key("relu", "backward"),
     ["relu", "exactly one of 'backward' and 'grad'"]),
    ("a non-differentiable op with a backward", set_row("relu", diff=False),
     ["relu", "no backward, grad or save"]),
    ("a save entry past the op's inputs", set_row("relu", save=["in1"]),
     ["relu", "the op has 1 inputs"]),
    ("a malformed save entry", set_row("relu", save=["input0"]), ["relu", "save entry"]),
    ("a grad expression naming an unknown input", set_row("silu", grad="g * z"),
     ["silu", "'z' is not an input"]),
    ("an unknown row key", set_row("relu", inplace=True), ["relu", "unknown key 'inplace'"]),
    ("an unknown dtype set", set_row("relu", dtypes="floats"), ["relu", "unknown dtypes"]),
    ("a generated API without its doc", drop_key("silu", "doc"),
     ["silu", "needs a 'doc' sentence"]),
    ("a doc on a row with no generated API", set_row("relu", doc="Rectifier."),
     ["relu", "'doc' documents a generated API"]),
    ("a Select rule on a binary op", set_row("add", rule="Select"),
     ["add", "rule Select is for Ternary ops"]),
    ("a Cast rule that does not read the dtype", drop_key("cast", "reads"),
     ["cast", "rule Cast reads the 'dtype' attribute"]),
]


def main():
    with open(TABLE) as f:
        base = yaml.safe_load(f)
    failures = []
    code, err, written = run(base)
    if code != 0 or written == 0:
        failures.append("the real table: exit {} ({} files): {}".format(code, written, err.strip()))
    for what, change, needles in CASES:
        code, err, written = run(mutated(base, change))
        missing = [n for n in needles if n not in err]
        if code != 1 or missing or written:
            failures.append("{}: exit {}, {} files written, message {!r} lacks {}".format(
                what, code, written, err.strip(), missing))
    for f in failures:
        print("FAIL", f)
    print("test_gen_ops: {} cases, {} failed".format(len(CASES) + 1, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
