#!/usr/bin/env python3
"""One line per kernel launch from an `ncu --csv --metrics gpu__time_duration.sum` log:
microseconds, grid, block and the kernel's name (cut to 100 characters)."""
import csv
import sys


def main(path):
    header = None
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if row and row[0] == "ID":
                header = row
                continue
            if header is None or len(row) != len(header):
                continue  # the program's own output and ncu's notes
            d = dict(zip(header, row))
            us = float(d["Metric Value"].replace(",", "")) / 1000.0
            print(f'{us:8.2f}  {d["Grid Size"]:>14} {d["Block Size"]:>12}  {d["Kernel Name"][:100]}')
    if header is None:
        sys.exit(f"ncu_table: no ncu CSV table in {path}")


if __name__ == "__main__":
    try:
        main(sys.argv[1])
    except BrokenPipeError:  # `| head`
        sys.exit(0)
