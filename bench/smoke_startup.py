#!/usr/bin/env python3
"""One short pass of bench/startup.py in every test run, so that it cannot break unnoticed: each
program's row has figures, and a build without the libraries is refused.

    smoke_startup.py BUILD_ROOT"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import startup  # noqa: E402

rows = startup.measure(sys.argv[1], 3)
assert [row["program"] for row in rows] == ["C program (/bin/true)", "C++ program (gpumem-replay --help)"], rows
for row in rows:
    assert all(row[key] > 0 for key in ("without_ms", "empty_ms", "with_ms")), row
    print(startup.table_row(row))
with tempfile.TemporaryDirectory() as empty_build:
    try:
        startup.measure(empty_build, 1)
    except SystemExit as refusal:
        assert "no " in str(refusal) and "build it first" in str(refusal), refusal
    else:
        raise AssertionError("a build without the libraries was measured")
print("startup smoke: ok")
