#!/usr/bin/env python3
"""Prints Ember's public headers: every project header that include/ember/ember.h reaches
through #include "..." lines, one path per line, umbrella first.

usage: public_headers.py SOURCE_DIR GENERATED_DIR [--doxygen-input FILE]

With --doxygen-input the list is written to FILE as a Doxygen `INPUT = ...` line instead. The
build writes it just before Doxygen runs, when the generated headers exist and their markers
can be read; at configure time they may not have been written yet.

A header is looked up in SOURCE_DIR, then in GENERATED_DIR (the op table's generated headers,
which may not exist yet at configure time: a path under a `generated/` directory is listed
there either way). System and third-party headers (<...>) are not followed. A header that
carries the line `// ember-doc: internal` (the op table's generated internals) is followed for
its includes but not listed: it is implementation the reference does not document.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
INTERNAL = "// ember-doc: internal"


def main(argv):
    if len(argv) not in (3, 5) or (len(argv) == 5 and argv[3] != "--doxygen-input"):
        print(__doc__, file=sys.stderr)
        return 2
    source, generated = argv[1], argv[2]
    seen, order = set(), []

    def resolve(rel):
        for root in (source, os.path.join(source, "include")):
            path = os.path.join(root, rel)
            if os.path.exists(path):
                return path
        path = os.path.join(generated, rel)
        if os.path.exists(path) or "/generated/" in "/" + rel:
            return path
        return None

    def visit(path):
        if path in seen:
            return
        seen.add(path)
        if not os.path.exists(path):  # a generated header not written yet
            order.append(path)
            return
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if INTERNAL not in text:
            order.append(path)
        for rel in INCLUDE.findall(text):
            found = resolve(rel)
            if found is None:
                raise SystemExit(f"public_headers.py: {path} includes \"{rel}\", not found")
            visit(os.path.normpath(found))

    visit(os.path.normpath(os.path.join(source, "include", "ember", "ember.h")))
    if len(argv) == 5:
        missing = [p for p in order if not os.path.exists(p)]
        if missing:
            raise SystemExit(f"public_headers.py: not generated yet: {' '.join(missing)}")
        text = "INPUT = " + " ".join(f'"{p}"' for p in order) + "\n"
        with open(argv[4] + ".tmp", "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(argv[4] + ".tmp", argv[4])
        return 0
    for p in order:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
