"""Shared helpers for the tests of scripts/gpumem-report, gpumem-plot and gpumem-top, which need no build:
where the scripts are, running one with its stdout closed, and what a terminal must never be sent.
"""

import os
import subprocess

SOURCE_ROOT = os.environ.get("GPUMEM_TEST_SOURCE_ROOT",
                             os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
# Each script is the source tree's unless GPUMEM_TEST_REPORT, _PLOT or _TOP names another (an installed copy).
REPORT = os.environ.get("GPUMEM_TEST_REPORT") or os.path.join(SOURCE_ROOT, "scripts", "gpumem-report")
PLOT = os.environ.get("GPUMEM_TEST_PLOT") or os.path.join(SOURCE_ROOT, "scripts", "gpumem-plot")
TOP = os.environ.get("GPUMEM_TEST_TOP") or os.path.join(SOURCE_ROOT, "scripts", "gpumem-top")
BROKEN_PIPE_STATUS = 141  # 128 + SIGPIPE: what a shell reports for a command killed by a closed pipe


def run_closed_stdout(command, timeout=60):
    """Runs `command` with its stdout a pipe whose reader has gone (as `| head` leaves it): any write
    to it fails. Returns the CompletedProcess (stderr captured as text)."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        return subprocess.run(command, stdout=writer, stderr=subprocess.PIPE, text=True, timeout=timeout)
    finally:
        os.close(writer)


def unsafe_characters(text: str) -> list:
    """The characters of `text` a terminal would take as controls: C0 except newline, DEL, C1, and the
    lone surrogates that stand for bytes that are not UTF-8."""
    return sorted({ch for ch in text if (ord(ch) < 0x20 and ch != "\n") or 0x7F <= ord(ch) <= 0x9F
                   or 0xD800 <= ord(ch) <= 0xDFFF})
