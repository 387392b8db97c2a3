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


# --- Prometheus's text format (0.0.4), parsed strictly ------------------------------------------

METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")


class ExpositionError(AssertionError):
    pass


def parse_labels(text: str, at: int) -> tuple:
    """Parses `{name="value",...}` from text[at] ('{'); returns (labels, index after '}')."""
    labels = {}
    at += 1
    while True:
        if text[at:at + 1] == "}":
            return labels, at + 1
        name = LABEL_NAME.match(text, at)
        if not name:
            raise ExpositionError(f"bad label name at {at}: {text!r}")
        at = name.end()
        if text[at:at + 2] != '="':
            raise ExpositionError(f"label {name.group()} without =\" : {text!r}")
        at += 2
        value = []
        while True:
            if at >= len(text):
                raise ExpositionError(f"unterminated label value: {text!r}")
            ch = text[at]
            if ch == "\\":
                escaped = text[at + 1:at + 2]
                if escaped not in ("\\", '"', "n"):
                    raise ExpositionError(f"bad escape \\{escaped} in a label value: {text!r}")
                value.append("\n" if escaped == "n" else escaped)
                at += 2
            elif ch == '"':
                at += 1
                break
            else:
                value.append(ch)
                at += 1
        if name.group() in labels:
            raise ExpositionError(f"label {name.group()} twice: {text!r}")
        labels[name.group()] = "".join(value)
        if text[at:at + 1] == ",":
            at += 1
        elif text[at:at + 1] != "}":
            raise ExpositionError(f"expected , or }} at {at}: {text!r}")


def parse_value(text: str) -> float:
    if text in ("+Inf", "-Inf", "NaN"):
        return float(text.replace("Inf", "inf"))
    if not re.fullmatch(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?", text):
        raise ExpositionError(f"bad sample value {text!r}")
    return float(text)


def parse_exposition(text: str) -> dict:
    """{metric: {"help": str, "type": str, "samples": {frozenset(labels.items()): value}}}; raises
    ExpositionError on anything the format does not allow, or that the textfile collector would refuse:
    a sample before its metric's HELP and TYPE, a metric's samples apart, a label set twice, a timestamp."""
    if not text.endswith("\n"):
        raise ExpositionError("the last line does not end with a newline")
    metrics, current, done = {}, None, set()
    for line in text[:-1].split("\n"):
        if line == "":
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                if not METRIC_NAME.fullmatch(name) or name in done:
                    raise ExpositionError(f"bad or repeated metric name in {line!r}")
                entry = metrics.setdefault(name, {"help": None, "type": None, "samples": {}})
                if entry["samples"]:
                    raise ExpositionError(f"{parts[1]} after the samples of {name}")
                key = parts[1].lower()
                if entry[key] is not None:
                    raise ExpositionError(f"a second {parts[1]} for {name}")
                if key == "type":
                    if len(parts) != 4 or parts[3] not in TYPES:
                        raise ExpositionError(f"bad TYPE line {line!r}")
                    entry["type"] = parts[3]
                else:
                    if len(parts) != 4 or not parts[3] or re.search(r"\\[^\\n]", parts[3]):
                        raise ExpositionError(f"bad HELP line {line!r}")
                    entry["help"] = parts[3]
                if current is not None and current != name:
                    done.add(current)
                current = name
            continue  # any other comment
        name = METRIC_NAME.match(line)
        if not name:
            raise ExpositionError(f"bad sample line {line!r}")
        at = name.end()
        labels = {}
        if line[at:at + 1] == "{":
            labels, at = parse_labels(line, at)
        if line[at:at + 1] != " " or " " in line[at + 1:]:
            raise ExpositionError(f"expected one value and no timestamp: {line!r}")
        value = parse_value(line[at + 1:])
        entry = metrics.get(name.group())
        if entry is None or entry["help"] is None or entry["type"] is None:
            raise ExpositionError(f"a sample of {name.group()} before its HELP and TYPE")
        if name.group() != current:
            raise ExpositionError(f"the samples of {name.group()} are not together")
        key = frozenset(labels.items())
        if key in entry["samples"]:
            raise ExpositionError(f"{name.group()} twice with the same labels: {line!r}")
        entry["samples"][key] = value
    return metrics


class ParserSelfTest(unittest.TestCase):
    """The parser refuses what the format does not allow (so the tests below mean something)."""

    def test_refusals(self):
        good = '# HELP m h\n# TYPE m gauge\nm{a="x\\"y\\\\z\\n"} 1\n'
        self.assertEqual(parse_exposition(good)["m"]["samples"], {frozenset({("a", 'x"y\\z\n')}): 1.0})
        for bad in ('m 1\n', '# TYPE m gauge\nm 1\n', '# HELP m h\n# TYPE m gauge\nm{a="\\x"} 1\n',
                    '# HELP m h\n# TYPE m gauge\nm{a="x} 1\n', '# HELP m h\n# TYPE m gauge\nm{a="x"} 1 123\n',
                    '# HELP m h\n# TYPE m gauge\nm 1\nm 2\n', '# HELP m h\n# TYPE m nope\nm 1\n',
                    '# HELP m h\n# TYPE m gauge\nm{1a="x"} 1\n', '# HELP m h\n# TYPE m gauge\nm one\n',
                    '# HELP m h\n# TYPE m gauge\nm 1', '# HELP m h\n# TYPE m gauge\n# HELP n h\n# TYPE n gauge\n'
                    'n 1\nm 1\n'):
            with self.subTest(text=bad):
                self.assertRaises(ExpositionError, parse_exposition, bad)


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
        metrics = parse_exposition(run_top("--prometheus", "--dir", self.dir).stdout)
        self.assertEqual(list(metrics["gpumem_gpu_mid_update"]["samples"].values()), [1])

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
        for mode in ("--json", "--once", "--prometheus"):
            with self.subTest(mode=mode):
                proc = t.run_closed_stdout(t.python_command(t.TOP, mode, "--dir", self.dir))
                self.assertEqual((proc.returncode, proc.stderr), (t.BROKEN_PIPE_STATUS, ""))
        proc = subprocess.run(["bash", "-c", f'"{sys.executable}" "{t.TOP}" --json --dir "$1" | head -c 10', "-",
                               self.dir], capture_output=True, text=True, timeout=60)
        self.assertEqual((proc.stdout, proc.stderr), ('{\n  "dir":', ""))

    def test_bad_command_lines_are_one_line(self):
        for args in (["--json", "--once"], ["--output", "x"], ["--interval", "nan"], ["--interval", "inf"],
                     ["--dir", os.path.join(self.dir, "absent"), "--once"]):
            with self.subTest(args=args):
                proc = run_top(*args)
                self.assertIn(proc.returncode, (1, 2), self.describe(proc))
                self.assertEqual(len(proc.stderr.strip().splitlines()), 1, self.describe(proc))
                self.assertTrue(proc.stderr.startswith("gpumem-top: "), self.describe(proc))


class PrometheusTest(TopTestCase):
    GPU_FIELDS = {"gpumem_gpu_total_bytes": 16 * GiB, "gpumem_gpu_capacity_bytes": 15 * GiB,
                  "gpumem_gpu_outside_bytes": GiB, "gpumem_gpu_held_bytes": 11 * GiB,
                  "gpumem_gpu_free_bytes": 4 * GiB, "gpumem_gpu_members": 2, "gpumem_gpu_dead_members": 2,
                  "gpumem_gpu_mid_update": 0}
    # metric -> the ledger's field, for the living; the dead hold nothing.
    MEMBER_FIELDS = {"gpumem_member_guarantee_bytes": "guarantee", "gpumem_member_budget_bytes": "allowance",
                     "gpumem_member_held_bytes": "held", "gpumem_member_in_use_bytes": "in_use",
                     "gpumem_member_waiting_bytes": "waiting_bytes",
                     "gpumem_member_reclaim_request_bytes": "reclaim_request"}
    # What a dead member's slot keeps showing: its settings and its history.
    KEPT = {"gpumem_member_refusals_total": "refusals", "gpumem_member_given_back_bytes_total": "given_back_bytes",
            "gpumem_member_min_bytes": "min_bytes", "gpumem_member_peak_borrowed_bytes": "peak_borrowed"}

    def raw_exposition(self) -> str:
        proc = run_top("--prometheus", "--dir", self.dir)
        self.assertEqual(proc.returncode, 0, self.describe(proc))
        self.assertEqual(proc.stderr, "")
        self.assertEqual(t.unsafe_characters(proc.stdout), [], proc.stdout)
        return proc.stdout

    def exposition(self) -> dict:
        return parse_exposition(self.raw_exposition())

    def test_every_sample_matches_the_ledger(self):
        path, members = self.shared_gpu()
        metrics = self.exposition()
        for name, entry in metrics.items():
            self.assertTrue(name.startswith("gpumem_"), name)
            self.assertEqual(entry["type"], "counter" if name.endswith("_total") else "gauge", name)
        gpu_labels = frozenset({("uuid", t.uuid_text(UUID)), ("ledger", path)})
        for name, value in self.GPU_FIELDS.items():
            self.assertEqual(metrics[name]["samples"], {gpu_labels: value}, name)
        self.assertEqual(metrics["gpumem_unreadable_ledgers"]["samples"], {frozenset(): 0})

        # Label values: control characters escaped as on a terminal (the text view's form), then the
        # format's own escapes, which the parser undid.
        commands = {0: "trainer", 1: "dead-one", 3: SHOWN_COMMAND, 7: "dead-two"}
        self.assertIn('command="a\\"b\\\\c\\\\x0ad\\\\x1b[2J\\\\x9b"', self.raw_exposition())

        def member_labels(slot, member):
            # A slot without a pid namespace (an older gpumem's) is taken as gpumem-top's own: a live
            # member's host pid is its pid. No identity record: the rest are empty.
            identity = {(label, "") for label in ("pid_namespace", "hostname", "pod_namespace", "pod", "container_id")}
            return frozenset({("uuid", t.uuid_text(UUID)), ("slot", str(slot)), ("pid", str(member["pid"])),
                              ("start_time", str(member["start_time"])), ("uid", str(member.get("uid", 0))),
                              ("command", commands[slot]), ("host_pid", str(member["pid"]) if slot in (0, 3) else ""),
                              *identity})
        for slot, member in members.items():
            alive = slot in (0, 3)
            labels = member_labels(slot, member)
            self.assertEqual(metrics["gpumem_member_alive"]["samples"][labels], int(alive))
            for name, field in self.MEMBER_FIELDS.items():
                self.assertEqual(metrics[name]["samples"][labels], member.get(field, 0) if alive else 0,
                                 (slot, name))
            for name, field in self.KEPT.items():
                self.assertEqual(metrics[name]["samples"][labels], member.get(field, 0), (slot, name))
            held, guarantee = (member["held"], member["guarantee"]) if alive else (0, 0)
            self.assertEqual(metrics["gpumem_member_borrowed_bytes"]["samples"][labels], max(0, held - guarantee))
            self.assertEqual(metrics["gpumem_member_weight"]["samples"][labels],
                             member.get("weight_milli", 1000) / 1000)
        # Every metric printed was checked above.
        checked = {*self.GPU_FIELDS, *self.MEMBER_FIELDS, *self.KEPT, "gpumem_unreadable_ledgers",
                   "gpumem_member_alive", "gpumem_member_borrowed_bytes", "gpumem_member_weight"}
        self.assertEqual(set(metrics), checked)
        held = sum(metrics["gpumem_member_held_bytes"]["samples"].values())
        self.assertEqual(held, self.GPU_FIELDS["gpumem_gpu_held_bytes"])
        self.assertEqual(sum(metrics["gpumem_member_alive"]["samples"].values()), 2)
        self.assertIn("refused", metrics["gpumem_member_refusals_total"]["help"])

    def test_no_gpu_and_two_gpus(self):
        metrics = self.exposition()
        self.assertEqual(metrics["gpumem_gpu_held_bytes"]["samples"], {})
        self.assertEqual(metrics["gpumem_unreadable_ledgers"]["samples"], {frozenset(): 0})
        t.write_ledger(self.dir, UUID, 16 * GiB, [dict(slot=0, pid=1, held=GiB)])
        t.write_ledger(self.dir, OTHER_UUID, 8 * GiB, [dict(slot=0, pid=1, held=GiB)])
        with open(os.path.join(self.dir, "gpu-nope.ledger"), "w") as f:
            f.write("x")
        metrics = self.exposition()
        self.assertEqual(sorted(metrics["gpumem_gpu_total_bytes"]["samples"].values()), [8 * GiB, 16 * GiB])
        self.assertEqual(len(metrics["gpumem_member_alive"]["samples"]), 2)
        self.assertEqual(metrics["gpumem_unreadable_ledgers"]["samples"], {frozenset(): 1})

    def test_output_replaces_the_file_whole(self):
        self.shared_gpu()
        out = tempfile.mkdtemp(prefix="gpumem-top-out-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", out], check=False))
        target = os.path.join(out, "gpumem.prom")
        with open(target, "w") as f:
            f.write("old\n")
        reader = open(target)  # a reader of the old file keeps it whole
        self.addCleanup(reader.close)
        proc = run_top("--prometheus", "--output", target, "--dir", self.dir)
        self.assertEqual((proc.returncode, proc.stdout, proc.stderr), (0, "", ""))
        self.assertEqual(reader.read(), "old\n")
        with open(target) as f:
            written = f.read()
        self.assertEqual(parse_exposition(written).keys(), self.exposition().keys())
        self.assertEqual(os.listdir(out), ["gpumem.prom"])  # no temporary file left
        mask = os.umask(0)
        os.umask(mask)
        self.assertEqual(os.stat(target).st_mode & 0o777, 0o666 & ~mask)
        # JSON likewise; a folder that does not exist is one line.
        proc = run_top("--json", "--output", target, "--dir", self.dir)
        self.assertEqual(proc.returncode, 0, self.describe(proc))
        with open(target) as f:
            self.assertEqual(len(json.load(f)["gpus"]), 1)
        proc = run_top("--prometheus", "--output", os.path.join(out, "absent", "x.prom"), "--dir", self.dir)
        self.assertEqual(proc.returncode, 1, self.describe(proc))
        self.assertEqual(len(proc.stderr.splitlines()), 1, self.describe(proc))
        self.assertEqual(os.listdir(out), ["gpumem.prom"])


class ListenTest(TopTestCase):
    """--prometheus --listen: a scrape gets the view as it is at the scrape."""

    def test_each_scrape_reads_the_ledgers_afresh(self):
        import urllib.error
        import urllib.request
        proc = subprocess.Popen(t.python_command(t.TOP, "--prometheus", "--listen", "127.0.0.1:0", "--dir", self.dir),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(proc.wait)
        self.addCleanup(proc.kill)
        line = proc.stderr.readline()
        match = re.match(r"gpumem-top: listening on 127\.0\.0\.1:(\d+) \(GET /metrics\)$", line.strip())
        self.assertTrue(match, line)
        url = f"http://127.0.0.1:{match.group(1)}"
        with urllib.request.urlopen(url + "/metrics", timeout=30) as answer:
            self.assertEqual(answer.headers["Content-Type"], "text/plain; version=0.0.4; charset=utf-8")
            self.assertEqual(parse_exposition(answer.read().decode())["gpumem_gpu_members"]["samples"], {})
        self.shared_gpu()
        with urllib.request.urlopen(url + "/metrics", timeout=30) as answer:
            served = answer.read().decode()
        self.assertEqual(served, run_top("--prometheus", "--dir", self.dir).stdout)
        with self.assertRaises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(url + "/other", timeout=30)
        self.assertEqual(raised.exception.code, 404)

    def test_bad_addresses_are_one_line(self):
        for args in (("--prometheus", "--listen", "host:port"), ("--json", "--listen", "9402"),
                     ("--prometheus", "--listen", "70000")):
            proc = run_top(*args, "--dir", self.dir)
            self.assertEqual((proc.returncode, proc.stdout), (2, ""), args)
            self.assertEqual(len(proc.stderr.splitlines()), 1, proc.stderr)
            self.assertIn("--listen", proc.stderr)


class IdentityTest(TopTestCase):
    """Members in containers and pods: each named by its identity record (when its tag is the slot's),
    its pid namespace and the pid gpumem-top's namespace sees; every text escaped, whatever it holds."""

    HOSTILE_HOST = b"node\x1b]0;owned\x07\xff\"x"

    def identity_ledger(self):
        members = [
            # In a pid namespace no process of this machine has: its pid cannot be resolved here, and the
            # pid it read from an outer /proc is shown marked.
            dict(slot=0, pid=1, start_time=21, uid=0, held=GiB, comm=b"share_hold", host_pid=777,
                 pid_namespace=4026599999, user_namespace=4026500001, identity_tag=0x1234),
            # A record left by the slot's former member (another tag): not this member's.
            dict(slot=2, pid=1, start_time=22, uid=1000, held=GiB, comm=b"old", pid_namespace=4026599998,
                 identity_tag=0x99),
            dict(slot=4, pid=7, start_time=23, uid=0, held=GiB, comm=b"hostile", pid_namespace=4026599997,
                 identity_tag=0x4321),
        ]
        identities = {
            0: dict(tag=0x1234, hostname=b"trainer-a", pod_namespace=b"ml", pod_name=b"trainer-a",
                    container_id=b"0123456789ab" + b"f" * 52, cgroup=b"/kubepods/pod1/" + b"0123456789ab" + b"f" * 52,
                    command_line=b"python3 train.py"),
            2: dict(tag=0x98, hostname=b"stale", pod_name=b"stale-pod"),
            4: dict(tag=0x4321, hostname=self.HOSTILE_HOST, pod_namespace=b"ns\n", pod_name=b"p\x9b" + b"x" * 255,
                    cgroup=b"/a\x1b[2J", command_line=b"\x1b[31mred"),
        }
        path = t.write_ledger(self.dir, UUID, 16 * GiB, members, identities=identities)
        self.hold(path, 0, 2, 4)
        return path

    def test_members_are_named_by_their_identity(self):
        self.identity_ledger()
        [gpu] = self.view()["gpus"]
        shown = {m["slot"]: m for m in gpu["members"]}
        self.assertEqual((shown[0]["pod_namespace"], shown[0]["pod_name"], shown[0]["hostname"]),
                         ("ml", "trainer-a", "trainer-a"))
        self.assertEqual(shown[0]["container_id"], "0123456789ab" + "f" * 52)
        self.assertEqual((shown[0]["pid_namespace"], shown[0]["host_pid"], shown[0]["pid_here"]), (4026599999, 777, None))
        self.assertEqual(shown[0]["user_namespace"], 4026500001)
        self.assertEqual(shown[0]["command_line"], "python3 train.py")
        self.assertEqual([shown[2][k] for k in ("hostname", "pod_name", "container_id")], [None] * 3)  # stale record
        self.assertEqual(shown[4]["hostname"], self.HOSTILE_HOST.decode("utf-8", "backslashreplace"))
        self.assertEqual(shown[4]["pod_name"], "p\\x9b" + "x" * 254)  # no NUL: read to the field's end (256 bytes)
        [text_gpu] = parse_text_view(self.text())
        rows = {row["COMMAND"]: row for row in text_gpu["rows"]}
        self.assertEqual(rows["share_hold"]["HOST PID"], "777*")
        self.assertEqual(rows["share_hold"]["WHO"], "pod ml/trainer-a, container 0123456789ab, uid 0")
        self.assertEqual(rows["old"]["WHO"], "uid 1000")
        self.assertIn("host node\\x1b]0;owned\\x07\\xff\"x", rows["hostile"]["WHO"])
        self.assertIn("pod ns\\x0a/p\\x9b", rows["hostile"]["WHO"])
        raw = run_top("--prometheus", "--dir", self.dir).stdout
        self.assertEqual(t.unsafe_characters(raw), [])
        metrics = parse_exposition(raw)
        labels = [dict(key) for key in metrics["gpumem_member_held_bytes"]["samples"]]
        by_slot = {int(label["slot"]): label for label in labels}
        self.assertEqual({k: by_slot[0][k] for k in ("pod", "pod_namespace", "hostname", "host_pid", "pid_namespace")},
                         dict(pod="trainer-a", pod_namespace="ml", hostname="trainer-a", host_pid="777",
                              pid_namespace="4026599999"))
        self.assertEqual(by_slot[4]["hostname"], 'node\\x1b]0;owned\\x07\\xff"x')

    def test_a_file_without_the_identity_table_is_read_as_before(self):
        t.write_ledger(self.dir, UUID, 16 * GiB, [dict(slot=0, pid=5, held=GiB, identity_tag=7)])
        self.hold(os.path.join(self.dir, t.ledger_name(UUID)), 0)
        [member] = self.view()["gpus"][0]["members"]
        self.assertEqual((member["pid"], member["held"], member["pod_name"], member["pid_here"]), (5, GiB, None, 5))


if __name__ == "__main__":
    print(f"gpumem-top: {t.TOP}", file=sys.stderr)
    unittest.main(verbosity=2)
