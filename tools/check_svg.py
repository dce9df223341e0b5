#!/usr/bin/env python3
"""Checks a picture Ember wrote: it parses as SVG, holds what it should, and renders.

  check_svg.py loss FILE --steps N [-- COMMAND...]
      the loss curves of an example (examples/support/loss_plot.h): the eager, compiled and
      relative_difference series, each a polyline of N points inside the picture
  check_svg.py graph FILE [--min-clusters K] [--contains TEXT ...] [-- COMMAND...]
      the fused graph of jit::Explanation::write_graph, rendered by Graphviz: at least K
      clusters (fused groups) and every TEXT among its labels

COMMAND, when given, runs first and must succeed (it writes FILE; its exit code 77, a skip, is
passed on). The picture is then rendered to PNG with rsvg-convert (Debian's librsvg2-bin),
which must accept it. Exits 0 when all holds,
1 when something does not, and 77 (skipped) when rsvg-convert is missing, or for `graph` when
FILE.svg was not written because Graphviz is not installed (FILE.dot instead).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"


def fail(msg):
    print(f"check_svg: {msg}")
    sys.exit(1)


def parse(path):
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as e:
        fail(f"{path} does not parse as XML: {e}")
    if root.tag != SVG + "svg":
        fail(f"{path}: the root element is {root.tag}, not svg")
    return root


def render(path):
    rsvg = shutil.which("rsvg-convert")
    if rsvg is None:
        print("check_svg: rsvg-convert not found (Debian: librsvg2-bin); skipped")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as tmp:
        png = os.path.join(tmp, "out.png")
        r = subprocess.run([rsvg, "-o", png, path], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"rsvg-convert rejects {path}: {r.stderr.strip()}")
        with open(png, "rb") as f:
            head = f.read(8)
        if head != b"\x89PNG\r\n\x1a\n" or os.path.getsize(png) < 1000:
            fail(f"rsvg-convert wrote no real PNG for {path}")


def check_loss(root, path, steps):
    width = float(root.get("width"))
    height = float(root.get("height"))
    series = {p.get("data-series"): p for p in root.iter(SVG + "polyline")}
    for name in ("eager", "compiled", "relative_difference"):
        if name not in series:
            fail(f"{path}: no '{name}' series (has {sorted(k for k in series if k)})")
        pts = [tuple(map(float, p.split(","))) for p in series[name].get("points").split()]
        if len(pts) != steps:
            fail(f"{path}: series '{name}' has {len(pts)} points, want {steps}")
        if any(not (0 <= x <= width and 0 <= y <= height) for x, y in pts):
            fail(f"{path}: series '{name}' leaves the picture")
        if any(b[0] <= a[0] for a, b in zip(pts, pts[1:])):
            fail(f"{path}: series '{name}' does not advance step by step")


def check_graph(root, path, min_clusters, texts):
    clusters = [g for g in root.iter(SVG + "g") if g.get("class") == "cluster"]
    if len(clusters) < min_clusters:
        fail(f"{path}: {len(clusters)} clusters (fused groups), want at least {min_clusters}")
    labels = " ".join(t.text or "" for t in root.iter(SVG + "text"))
    for want in texts:
        if want not in labels:
            fail(f"{path}: no label contains '{want}'")


def main():
    argv = sys.argv[1:]
    command = []
    if "--" in argv:
        i = argv.index("--")
        argv, command = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("kind", choices=["loss", "graph"])
    ap.add_argument("file")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--min-clusters", type=int, default=1)
    ap.add_argument("--contains", action="append", default=[])
    args = ap.parse_args(argv)
    if command:
        r = subprocess.run(command)
        if r.returncode == 77:  # the command skipped (its data is missing, say)
            print(f"check_svg: {' '.join(command)} skipped")
            sys.exit(77)
        if r.returncode != 0:
            fail(f"{' '.join(command)} exited with {r.returncode}")
    path = args.file
    if args.kind == "graph" and not os.path.exists(path):
        dot = os.path.splitext(path)[0] + ".dot"
        if os.path.exists(dot) and shutil.which("dot") is None:
            print(f"check_svg: Graphviz not installed, {dot} written instead; skipped")
            sys.exit(77)
    if not os.path.exists(path):
        fail(f"{path} was not written")
    root = parse(path)
    if args.kind == "loss":
        if args.steps is None:
            fail("loss: --steps is required")
        check_loss(root, path, args.steps)
    else:
        check_graph(root, path, args.min_clusters, args.contains)
    render(path)
    print(f"check_svg: {path} holds what it should and renders")
    return 0


if __name__ == "__main__":
    sys.exit(main())
