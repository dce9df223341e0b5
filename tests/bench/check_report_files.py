#!/usr/bin/env python3
"""Checks what the report tests cannot check from C++: that their hand-written documents are
valid against bench/schema/bench.schema.json (so the tests exercise real documents) and that the
charts parse as XML with an <svg> root.

    check_report_files.py BENCH_REPORT_TESTS SCHEMA OUT_DIR

Runs the hidden [write-files] case of BENCH_REPORT_TESTS to write the files into OUT_DIR."""
import json
import os
import subprocess
import sys
import xml.dom.minidom

try:
    import jsonschema
except ImportError:  # python3-jsonschema (scripts/setup.sh); ctest reports exit 77 as skipped
    print("python3-jsonschema is not installed: skipped", file=sys.stderr)
    sys.exit(77)


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    binary, schema_path, out = sys.argv[1:]
    env = dict(os.environ, EMBER_REPORT_TEST_OUT=out)
    subprocess.run([binary, "[write-files]"], env=env, check=True)
    with open(schema_path) as f:
        schema = json.load(f)
    validator = jsonschema.Draft202012Validator(schema)
    failures = 0
    for name in ("ember.json", "torch.json"):
        with open(os.path.join(out, name)) as f:
            doc = json.load(f)
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
        for e in errors:
            print(f"{name}: {'/'.join(map(str, e.path))}: {e.message}", file=sys.stderr)
        failures += len(errors)
        print(f"{name}: {len(doc['results'])} results, {len(errors)} schema errors")
    for name in ("chart.svg", "chart_ember.svg", "chart_escaped.svg"):
        path = os.path.join(out, name)
        try:
            root = xml.dom.minidom.parse(path).documentElement
        except Exception as e:  # the parser's own exception types vary
            print(f"{name}: not well-formed XML: {e}", file=sys.stderr)
            failures += 1
            continue
        if root.tagName != "svg" or root.getAttribute("xmlns") != "http://www.w3.org/2000/svg":
            print(f"{name}: root is <{root.tagName}>, not an SVG <svg>", file=sys.stderr)
            failures += 1
            continue
        print(f"{name}: well-formed SVG, {len(root.getElementsByTagName('rect'))} rects")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
