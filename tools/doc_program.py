#!/usr/bin/env python3
"""Turns a documentation page into the program it shows, and checks what the program prints.

  doc_program.py extract PAGE OUT.cpp     the page's ```cpp blocks, in order, as one source file
                                          (#line directives point compile errors at the page)
  doc_program.py run PAGE EXE [ARGS...]   runs EXE; its stdout must equal the page's ```output
                                          blocks, in order (a `{...}` in an output line matches
                                          any text, for values such as timings)

A page's other fences (```sh, ```text, ...) are prose. `run` exits with the program's code if it
fails, 1 if the output differs (printing both), and 0 otherwise.
"""
import os
import re
import subprocess
import sys

FENCE = re.compile(r"^```(\w[\w-]*)?\s*$")


def blocks(page):
    """(language, first line number, lines) of each fenced block of the page."""
    out, lang, start, lines = [], None, 0, None
    with open(page, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            m = FENCE.match(line)
            if lines is None:
                if m:
                    lang, start, lines = m.group(1) or "", n + 1, []
            elif line.strip() == "```":
                out.append((lang, start, lines))
                lines = None
            else:
                lines.append(line)
    if lines is not None:
        raise SystemExit(f"{page}:{start - 1}: a ``` block is not closed")
    return out


def extract(page, out_path):
    code = [b for b in blocks(page) if b[0] == "cpp"]
    if not code:
        raise SystemExit(f"{page}: no ```cpp block: not a program")
    page_abs = os.path.abspath(page)
    text = "".join(f'#line {start} "{page_abs}"\n' + "\n".join(lines) + "\n"
                   for _, start, lines in code)
    old = None
    if os.path.exists(out_path):
        with open(out_path, encoding="utf-8") as f:
            old = f.read()
    if old != text:  # keep the timestamp: no needless rebuilds
        with open(out_path, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


def line_matches(expected, actual):
    parts = [re.escape(p) for p in expected.split("{...}")]
    return re.fullmatch(".*".join(parts), actual) is not None


def run(page, argv):
    expected = [l for lang, _, lines in blocks(page) if lang == "output" for l in lines]
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        print(f"doc_program: {argv[0]} exited with {r.returncode}", file=sys.stderr)
        return r.returncode
    actual = r.stdout.rstrip("\n").split("\n") if r.stdout else []
    ok = len(expected) == len(actual) and all(map(line_matches, expected, actual))
    if not ok:
        print(f"doc_program: the output of {argv[0]} differs from {page}'s ```output blocks")
        for i in range(max(len(expected), len(actual))):
            e = expected[i] if i < len(expected) else "<none>"
            a = actual[i] if i < len(actual) else "<none>"
            mark = "  " if i < len(expected) and i < len(actual) and line_matches(e, a) else "!!"
            print(f"{mark} page:    {e}\n{mark} program: {a}")
        sys.stderr.write(r.stderr)
        return 1
    return 0


def main(argv):
    if len(argv) >= 4 and argv[1] == "extract":
        return extract(argv[2], argv[3])
    if len(argv) >= 4 and argv[1] == "run":
        return run(argv[2], argv[3:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
