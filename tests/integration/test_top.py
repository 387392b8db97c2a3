"""scripts/gpumem-top over synthetic ledgers: what its views show, and what hostile ledgers cannot do.

The ledgers are written here in the shim's layout (shim/share/ledger_format.h) with known figures, and
this process holds the lock bytes of the members it calls alive (an OFD lock is held by an open file
description, so gpumem-top, reading through its own, sees it held). No build is needed: the script runs
from the source tree; test_share.py reads ledgers that real members wrote.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest

import tools_testlib as t

MiB = 1 << 20
GiB = 1 << 30
UUID = bytes.fromhex("0123456789abcdef0123456789abcdef")
OTHER_UUID = bytes.fromhex("fedcba9876543210fedcba9876543210")
HOSTILE_COMMAND = b'a"b\\c\nd\x1b[2J\x9b'  # 11 bytes: a quote, a backslash, a newline, ESC, a byte not UTF-8
SHOWN_COMMAND = 'a"b\\c\\x0ad\\x1b[2J\\x9b'  # as text shows it


def run_top(*args, timeout=60):
    return subprocess.run(t.python_command(t.TOP, *args), capture_output=True, text=True, timeout=timeout)


# --- gpumem-top ---------------------------------------------------------------------------------

class TopTestCase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gpumem-top-test-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", self.dir], check=False))

    def hold(self, path, *slots, ledger_lock=False):
        fd = t.hold_locks(path, *slots, ledger_lock=ledger_lock)
        self.addCleanup(os.close, fd)

    def describe(self, proc):
        return f"exit {proc.returncode}\n--- stdout\n{proc.stdout}--- stderr\n{proc.stderr}"

    def view(self, *args):
        proc = run_top("--json", "--dir", self.dir, *args)
        self.assertEqual(proc.returncode, 0, self.describe(proc))
        self.assertTrue(proc.stdout.isascii(), proc.stdout)
        return json.loads(proc.stdout)

    def text(self):
        proc = run_top("--once", "--dir", self.dir)
        self.assertEqual(proc.returncode, 0, self.describe(proc))
        self.assertEqual(t.unsafe_characters(proc.stdout), [], proc.stdout)
        return proc.stdout

    def shared_gpu(self):
        """A 16 GiB GPU (1 GiB outside, 15 GiB of capacity): slots 0 and 3 alive, 1 and 7 dead, the dead
        still recording what they held when they died."""
        members = [
            dict(slot=0, pid=4100, start_time=11, uid=1000, weight_milli=2000, min_bytes=GiB, held=9 * GiB,
                 in_use=8 * GiB, guarantee=8 * GiB, allowance=10 * GiB, refusals=3, given_back_bytes=64 * MiB,
                 peak_borrowed=GiB, comm=b"trainer"),
            dict(slot=1, pid=4101, start_time=12, held=3 * GiB, in_use=3 * GiB, guarantee=2 * GiB,
                 allowance=4 * GiB, waiting_bytes=GiB, refusals=5, comm=b"dead-one"),
            dict(slot=3, pid=4103, start_time=13, held=2 * GiB, in_use=GiB, guarantee=7 * GiB, allowance=7 * GiB,
                 waiting_bytes=512 * MiB, reclaim_request=256 * MiB, comm=HOSTILE_COMMAND),
            dict(slot=7, pid=4107, start_time=14, held=5 * GiB, guarantee=5 * GiB, allowance=5 * GiB,
                 comm=b"dead-two"),
        ]
        path = t.write_ledger(self.dir, UUID, 16 * GiB, members, outside=GiB, capacity=15 * GiB)
        self.hold(path, 0, 3)
        return path, {m["slot"]: m for m in members}


HEADER_LINE = re.compile(r"^(?P<uuid>GPU-[0-9a-f-]+): .*, (?P<alive>\d+) process(?:es)? alive, (?P<dead>\d+) dead, "
                         r"held (?P<held>[0-9.]+ (?:B|KiB|MiB|GiB)), free (?P<free>[0-9.]+ (?:B|KiB|MiB|GiB))$")
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": MiB, "GiB": GiB}


def size_of(text: str) -> int:
    number, unit = text.split()
    return round(float(number) * UNITS[unit])


def parse_text_view(text: str) -> list:
    """Each GPU of a --once view: its header's figures and its rows, cells split on two spaces or more."""
    gpus = []
    lines = text.splitlines()
    for index, line in enumerate(lines):
        header = HEADER_LINE.match(line)
        if not header:
            continue
        gpu = dict(header.groupdict(), rows=[], marker=None)
        at = index + 1
        if lines[at].startswith("  mid-update: "):
            gpu["marker"] = lines[at]
            at += 1
        columns = re.split(r" {2,}", lines[at].strip())
        for row in lines[at + 1:]:
            if not row.startswith("  ") or not row.strip():
                break
            gpu["rows"].append(dict(zip(columns + ["STATE"], re.split(r" {2,}", row.strip()))))
        gpus.append(gpu)
    return gpus


class MembersTest(TopTestCase):
    def test_the_header_agrees_with_the_rows(self):
        _, members = self.shared_gpu()
        [gpu] = parse_text_view(self.text())
        self.assertEqual(gpu["uuid"], t.uuid_text(UUID))
        rows = gpu["rows"]
        alive = [row for row in rows if row.get("STATE") != "dead"]
        dead = [row for row in rows if row.get("STATE") == "dead"]
        self.assertEqual((int(gpu["alive"]), int(gpu["dead"])), (len(alive), len(dead)))
        self.assertEqual((len(alive), len(dead)), (2, 2))
        # Held: the sum of the rows, the dead holding nothing.
        self.assertEqual(size_of(gpu["held"]), sum(size_of(row["HELD"]) for row in alive))
        self.assertEqual(size_of(gpu["held"]), 11 * GiB)
        self.assertEqual(size_of(gpu["free"]), 4 * GiB)
        for row in dead:
            self.assertEqual([row[c] for c in ("GUARANTEE", "BUDGET", "IN USE", "HELD", "BORROWED", "WAITING")],
                             ["-"] * 6, row)
        self.assertEqual(sorted(int(row["PID"]) for row in dead), [4101, 4107])
        trainer = next(row for row in alive if row["PID"] == "4100")
        self.assertEqual((trainer["WEIGHT"], trainer["HELD"], trainer["BORROWED"], trainer["WAITING"]),
                         ("2", "9.0 GiB", "1.0 GiB", "-"))

    def test_json_sums_agree_with_the_members(self):
        _, members = self.shared_gpu()
        [gpu] = self.view()["gpus"]
        shown = {m["slot"]: m for m in gpu["members"]}
        self.assertEqual(sorted(shown), [0, 1, 3, 7])
        self.assertEqual(gpu["held"], sum(m["held"] for m in gpu["members"]))
        self.assertEqual(gpu["free"], gpu["capacity"] - gpu["held"])
        self.assertEqual((gpu["mid_update"], gpu["update_interrupted"]), (False, False))
        for slot in (1, 7):
            self.assertFalse(shown[slot]["alive"])
            self.assertEqual([shown[slot][k] for k in ("held", "in_use", "borrowed", "guarantee", "budget", "waiting")],
                             [0] * 6)
        self.assertEqual(shown[0]["held"], 9 * GiB)
        self.assertEqual(shown[3]["command"], HOSTILE_COMMAND.decode("utf-8", "backslashreplace"))


class MidUpdateTest(TopTestCase):
    """A generation left odd: shown, marked, after a short wait; never hidden."""

    def test_a_member_killed_inside_an_update(self):
        path = t.write_ledger(self.dir, UUID, 16 * GiB, [dict(slot=0, held=GiB, guarantee=GiB)], generation=7)
        self.hold(path, 0)
        started = time.monotonic()
        [gpu] = self.view()["gpus"]
        self.assertLess(time.monotonic() - started, 5)
        self.assertEqual((gpu["mid_update"], gpu["update_interrupted"], gpu["held"]), (True, True, GiB))
        [shown] = parse_text_view(self.text())
        self.assertIn("a member died inside an update", shown["marker"])
        self.assertEqual(shown["rows"][0]["HELD"], "1.0 GiB")

    def test_a_member_inside_an_update(self):
        path = t.write_ledger(self.dir, UUID, 16 * GiB, [dict(slot=0, held=GiB)], generation=9)
        self.hold(path, 0, ledger_lock=True)  # a writer holds the ledger's lock: it is alive, just slow
        [gpu] = self.view()["gpus"]
        self.assertEqual((gpu["mid_update"], gpu["update_interrupted"]), (True, False))
        [shown] = parse_text_view(self.text())
        self.assertIn("a member is updating the ledger", shown["marker"])

    def test_an_even_generation_is_not_marked(self):
        t.write_ledger(self.dir, UUID, 16 * GiB, [dict(slot=0, held=GiB)], generation=8)
        [gpu] = self.view()["gpus"]
        self.assertFalse(gpu["mid_update"])
        self.assertIsNone(parse_text_view(self.text())[0]["marker"])


class HostileLedgerTest(TopTestCase):
    def test_control_characters_are_escaped(self):
        self.shared_gpu()
        text = self.text()
        self.assertIn(f"  {SHOWN_COMMAND}  ", text)
        # A file named as a ledger with control characters in its name: named, escaped, as unreadable.
        with open(os.path.join(self.dir, "gpu-\x1b[31m\x9b.ledger"), "w") as f:
            f.write("not a ledger")
        text = self.text()
        self.assertIn("gpu-\\x1b[31m\\x9b.ledger: not a gpumem ledger", text)
        view = self.view()
        self.assertEqual(view["unreadable"][0]["file"], os.path.join(self.dir, "gpu-\x1b[31m\x9b.ledger"))

    def test_files_that_are_not_ledgers_are_named(self):
        t.write_ledger(self.dir, UUID, 16 * GiB, [dict(slot=0, held=GiB)])
        os.mkfifo(os.path.join(self.dir, t.ledger_name(bytes(16))))
        os.symlink(os.path.join(self.dir, t.ledger_name(UUID)), os.path.join(self.dir, t.ledger_name(b"\x11" * 16)))
        with open(os.path.join(self.dir, t.ledger_name(b"\x22" * 16)), "wb") as f:
            f.write(t.ledger_bytes(b"\x22" * 16, 16 * GiB)[:5000])
        with open(os.path.join(self.dir, t.ledger_name(OTHER_UUID)), "wb") as f:
            f.write(t.ledger_bytes(UUID, 16 * GiB))  # a copy of another GPU's ledger
        with open(os.path.join(self.dir, t.ledger_name(b"\x33" * 16)), "wb") as f:
            f.write(bytes(t.LEDGER_BYTES))
        started = time.monotonic()
        view = self.view()
        self.assertLess(time.monotonic() - started, 10)
        self.assertEqual([gpu["uuid"] for gpu in view["gpus"]], [t.uuid_text(UUID)])
        errors = {os.path.basename(p["file"]): p["error"] for p in view["unreadable"]}
        self.assertEqual(errors, {
            t.ledger_name(bytes(16)): "is a FIFO, not a regular file",
            t.ledger_name(b"\x11" * 16): "is a symbolic link, not a regular file",
            t.ledger_name(b"\x22" * 16): "malformed (sizes out of range)",
            t.ledger_name(b"\x33" * 16): "not initialised (its creator has not finished it)",
            t.ledger_name(OTHER_UUID): f"its header names another GPU ({t.uuid_text(UUID)})",
        })

    def test_figures_are_clamped(self):
        huge = (1 << 64) - 1
        path = t.write_ledger(self.dir, UUID, 16 * GiB, [
            dict(slot=0, pid=-5, held=huge, in_use=huge, guarantee=huge, allowance=huge, waiting_bytes=huge,
                 weight_milli=0, demand=huge - 1)], outside=huge, capacity=huge)
        self.hold(path, 0)
        [gpu] = self.view()["gpus"]
        [member] = gpu["members"]
        self.assertEqual((gpu["capacity"], gpu["outside"], gpu["held"], gpu["free"]),
                         (16 * GiB, 16 * GiB, 16 * GiB, 0))
        self.assertEqual((member["held"], member["waiting"], member["weight"], member["demand"], member["pid"]),
                         (16 * GiB, 16 * GiB, 1.0, 16 * GiB, -5))
        self.text()


class OutputTest(TopTestCase):
    def test_a_closed_pipe_is_quiet(self):
        self.shared_gpu()
        for mode in ("--json", "--once"):
            with self.subTest(mode=mode):
                proc = t.run_closed_stdout(t.python_command(t.TOP, mode, "--dir", self.dir))
                self.assertEqual((proc.returncode, proc.stderr), (t.BROKEN_PIPE_STATUS, ""))
        proc = subprocess.run(["bash", "-c", f'"{sys.executable}" "{t.TOP}" --json --dir "$1" | head -c 10', "-",
                               self.dir], capture_output=True, text=True, timeout=60)
        self.assertEqual((proc.stdout, proc.stderr), ('{\n  "dir":', ""))

    def test_bad_command_lines_are_one_line(self):
        for args in (["--json", "--once"], ["--interval", "nan"], ["--interval", "inf"],
                     ["--dir", os.path.join(self.dir, "absent"), "--once"]):
            with self.subTest(args=args):
                proc = run_top(*args)
                self.assertIn(proc.returncode, (1, 2), self.describe(proc))
                self.assertEqual(len(proc.stderr.strip().splitlines()), 1, self.describe(proc))
                self.assertTrue(proc.stderr.startswith("gpumem-top: "), self.describe(proc))


if __name__ == "__main__":
    print(f"gpumem-top: {t.TOP}", file=sys.stderr)
    unittest.main(verbosity=2)
