"""Random and broken inputs through scripts/gpumem-report, gpumem-plot and gpumem-top.

With a fixed seed, each tool gets random bytes, its fixtures (statistics files, traces, ledgers) cut at
every N-th byte and mutated: bytes flipped, inserted and deleted, values swapped for hostile ones (huge,
negative, fractional, NaN, control characters, lone surrogates, deep nesting), ledgers with random bytes
in random fields. For every input the tool must finish with exit status 0, 1 or 2, at most two lines on
stderr and never a traceback, within a few seconds, and what it prints must be safe for a terminal (no
control character but newline) or valid JSON in ASCII, or an exposition the strict parser of test_top.py
accepts.

Most cases run in this process, through each script's run(argv) (the scripts load as modules), which
is fast; a few of each run the script as a process, as a user would. GPUMEM_FUZZ_SEED picks another
seed and GPUMEM_FUZZ_SCALE multiplies the number of cases, for a longer search by hand (both unset in CI).
"""

import concurrent.futures
import contextlib
import importlib.machinery
import importlib.util
import inspect
import io
import json
import os
import random
import re
import struct
import subprocess
import sys
import tempfile
import time
import unittest

import tools_testlib as t
from test_top import ExpositionError, parse_exposition

SEED = int(os.environ.get("GPUMEM_FUZZ_SEED", "20251126"))
SCALE = float(os.environ.get("GPUMEM_FUZZ_SCALE", "1"))
IN_PROCESS_CASES = int(400 * SCALE)  # per tool
PROCESS_CASES = int(24 * SCALE)      # per tool
CASE_SECONDS = 10                    # the most one input may take
GiB = 1 << 30

# Values a file may hold that are read (and must be shown safely), then values that must be refused.
NASTY_VALUES = [0, 1, (1 << 64) - 1, 12345, None, "n\x1b[2J\x9b", "\u202e\u0085", "\u00e9\U0001f600",
                "GPU-\x1b]0;x\x07", "a\nb\tc\x7f"]
HOSTILE_VALUES = [10 ** 400, 1 << 64, (1 << 64) - 1, 1 << 63, -1, 0, 1.5, 1e308, float("nan"), float("inf"), True,
                  False, None, "", "\x1b[2J\x1b]0;x\x07", "\u009b31m", "\ud800", "\udcff", "\u202e", "a" * 300, [],
                  {}, [[[[]]]], {"devices": []}, "GPU-" + "f" * 100]
HOSTILE_TOKENS = ["[" * 5000, "{\"a\":" * 70, "1" * 5000, "1e999", "-0", "NaN", "\"\\ud800\"", "\"\\u001b[2J\"",
                  "\"\x1b\"", "\x00", "\xff", "\"\\u009b\"", ",", "]", "}", "null", "true", "\"", "\\"]
TRACE_TOKENS = ["", " ", "-1", "+5", "1_0", "1e308", "1e-400", "nan", "inf", "-inf", "0x", "0x" + "f" * 17,
                str(1 << 64), str((1 << 64) - 1), str(1 << 63), "9" * 30, "9" * 5000, "\x1b[2J", "\u009b", "\ud800",
                "allocate", "free", "deallocate", "allocate failure", "\u0661\u0662", "23:59:59.5", "99:99:99",
                "00:00:61", "1:2:3:4", "\"", "\"\"", "\x00", "\x7f", "\u202e", "Limit", "Device", ",,,"]
TRACE_HEADER = "Thread,Time,Action,Pointer,Size,Stream,Device,Reserved,Limit"


def load(script: str, name: str):
    """A script (a file without .py) as a module; its main block does not run."""
    loader = importlib.machinery.SourceFileLoader(name, script)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    loader.exec_module(module)
    return module


REPORT = load(t.REPORT, "gpumem_report_tool")
PLOT = load(t.PLOT, "gpumem_plot_tool")
TOP = load(t.TOP, "gpumem_top_tool")
TOP.UPDATE_WAIT_S = 0.003  # a ledger left mid-update is shown after this: half of the random ones are


# --- fixtures -----------------------------------------------------------------------------------

def stats_documents() -> list:
    device = {"device": 0, "uuid": "GPU-aaaaaaaa-0000-0000-0000-000000000001", "mode": "bfc", "limit": 6 * GiB,
              "reserved": GiB, "peak_reserved": 2 * GiB, "in_use": 0, "peak_in_use": GiB, "allocations": 10,
              "frees": 10, "refusals": 1, "call_ns": 1500, "ranks_sharing": 2, "fragmentation": 0.25,
              "paths": {"arena": {"allocations": 10, "bytes": 4096}},
              "share": {"guarantee": GiB, "allowance": 2 * GiB, "held": 0, "capacity": 15 * GiB}}
    rank = {"gpumem_version": "0.1.0", "pid": 4242, "host": "n1", "launcher": "Open MPI", "rank": 3,
            "local_rank": 1, "local_ranks": 4, "devices": [device, dict(device, device=1, uuid=None)]}
    older = {"gpumem_version": "0.0.9", "pid": 77, "devices": [{"device": 1, "limit": GiB, "peak_in_use": 10}]}
    return [rank, older]


def trace_text(rng: random.Random) -> str:
    rows, live, t0 = [TRACE_HEADER], [], 1764047045.0
    for i in range(rng.randint(1, 40)):
        device = rng.randint(0, 2)
        if live and rng.random() < 0.4:
            pointer, size, device = live.pop(rng.randrange(len(live)))
            rows.append(f"7,{t0 + i * 0.01:.6f},free,{pointer:#x},{size},0,{device},{rng.randint(0, 1 << 30)},"
                        f"{1 << 30}")
        elif rng.random() < 0.1:
            rows.append(f"7,{t0 + i * 0.01:.6f},allocate failure,0x0,{rng.randint(1, 1 << 34)},0,{device},,")
        else:
            pointer, size = 0x7F0000000000 + i * 0x100000, rng.randint(0, 1 << 28)
            live.append((pointer, size, device))
            rows.append(f"7,{t0 + i * 0.01:.6f},allocate,{pointer:#x},{size},0,{device},{rng.randint(0, 1 << 30)},"
                        f"{rng.choice(['', 1 << 30, 1 << 31])}")
    return "\n".join(rows) + "\n"


def ledger_fixture(rng: random.Random) -> bytearray:
    members = [dict(slot=slot, pid=rng.randint(1, 1 << 22), start_time=rng.randint(0, 1 << 40),
                    held=rng.randint(0, 8 * GiB), in_use=rng.randint(0, 8 * GiB), guarantee=rng.randint(0, 8 * GiB),
                    allowance=rng.randint(0, 8 * GiB), waiting_bytes=rng.choice([0, GiB]),
                    refusals=rng.randint(0, 9), comm=rng.choice([b"python3", b"trainer", b"\x1b[2J\x9b\"\\\n"]))
               for slot in rng.sample(range(t.SLOTS), rng.randint(0, 6))]
    return t.ledger_bytes(LEDGER_UUID, 16 * GiB, members, generation=2 * rng.randint(0, 1 << 40), outside=GiB)


LEDGER_UUID = bytes.fromhex("00112233445566778899aabbccddeeff")


def ledger_fields():
    """(offset, size) of every field of the header and of a slot, as the struct formats lay them out."""
    def fields(layout):
        out, at = [], 0
        for count, code in re.findall(r"(\d*)([a-zA-Z?])", layout.format.lstrip("<")):
            count = int(count or 1)
            if code == "s":
                out.append((at, count))
            elif code != "x":
                out.extend((at + i * struct.calcsize(code), struct.calcsize(code)) for i in range(count))
            at += count * struct.calcsize(code.replace("s", "x"))
        assert at == layout.size
        return out
    return fields(t.HEADER), fields(t.SLOT)


HEADER_FIELDS, SLOT_FIELDS = ledger_fields()


# --- mutations ----------------------------------------------------------------------------------

SYNTAX_BYTES = b'0123456789,.:-+xeE"[]{} \n\x1b\\'


def mutate_bytes(rng: random.Random, data: bytes, text: bool = True) -> bytes:
    """Bytes flipped, inserted and deleted; for a text format, mostly bytes of its syntax."""
    def byte():
        return rng.choice(SYNTAX_BYTES) if text and rng.random() < 0.8 else rng.randrange(256)
    data = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        choice = rng.random()
        at = rng.randint(0, len(data))
        if choice < 0.4 and data:
            data[min(at, len(data) - 1)] = byte()
        elif choice < 0.7:
            data[at:at] = bytes(byte() for _ in range(rng.randint(1, 8)))
        else:
            del data[at:at + rng.randint(1, 16)]
    return bytes(data)


def json_slots(document) -> list:
    """Every (container, key) in a JSON document, walked without recursion."""
    out, stack = [], [document]
    while stack:
        value = stack.pop()
        keys = list(value) if isinstance(value, dict) else range(len(value)) if isinstance(value, list) else ()
        for key in keys:
            out.append((value, key))
            stack.append(value[key])
    return out


def stats_input(rng: random.Random, case: int) -> bytes:
    documents = stats_documents()
    text = json.dumps(rng.choice(documents)).encode()
    kind = case % 5
    if kind == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 600)))
    if kind == 1:  # cut at every N-th byte, in turn
        step = max(1, len(text) // 60)
        return text[:(case // 5 * step) % (len(text) + 1)]
    if kind == 2:
        return mutate_bytes(rng, text)
    if kind == 3:  # a value swapped for a hostile one
        document = rng.choice(documents)
        for _ in range(rng.randint(1, 3)):
            container, key = rng.choice(json_slots(document))
            container[key] = rng.choice(NASTY_VALUES if rng.random() < 0.5 else HOSTILE_VALUES)
        return json.dumps(document, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
    at = rng.randint(0, len(text))
    return text[:at] + rng.choice(HOSTILE_TOKENS).encode("utf-8", "surrogatepass") + text[at:]


def trace_input(rng: random.Random, case: int) -> bytes:
    text = trace_text(rng)
    kind = case % 5
    if kind == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 600)))
    if kind == 1:  # cut anywhere
        return text[:rng.randint(0, len(text))].encode()
    if kind == 2:
        return mutate_bytes(rng, text.encode())
    lines = [line.split(",") for line in text.splitlines()]
    for _ in range(rng.randint(1, 4)):
        row = rng.choice(lines)
        if kind == 3 or row is lines[0]:
            row[rng.randrange(len(row))] = rng.choice(TRACE_TOKENS)
        else:  # a field added or removed
            if rng.random() < 0.5:
                row.insert(rng.randint(0, len(row)), rng.choice(TRACE_TOKENS))
            elif len(row) > 1:
                del row[rng.randrange(len(row))]
    if kind == 4 and rng.random() < 0.3:
        lines[1:] = rng.sample(lines[1:], len(lines) - 1)  # out of order
    return "\n".join(",".join(row) for row in lines).encode("utf-8", "surrogatepass") + b"\n"


def ledger_input(rng: random.Random, case: int) -> bytes:
    data = ledger_fixture(rng)
    kind = case % 5
    if kind == 0:
        return bytes(rng.randrange(256) for _ in range(rng.choice([0, 8, 200, t.LEDGER_BYTES])))
    if kind == 1:  # cut
        return bytes(data[:rng.randint(0, len(data))])
    for _ in range(rng.randint(1, 6)):  # random bytes in random fields of the header or of a slot
        if rng.random() < 0.2:  # mostly the fields a reader does not check: total, generation, figures
            offset, size = rng.choice(HEADER_FIELDS if rng.random() < 0.3 else HEADER_FIELDS[5:])
        else:
            offset, size = rng.choice(SLOT_FIELDS)
            offset += t.HEADER_BYTES + rng.choice([0, 1, 2, rng.randrange(t.SLOTS)]) * t.SLOT.size
        value = rng.choice([bytes(rng.randrange(256) for _ in range(size)), b"\xff" * size, bytes(size),
                            (1).to_bytes(size, "little")])
        if kind == 3 and offset == 48:
            value = (2 * rng.randrange(1 << 40) + 1).to_bytes(8, "little")  # a writer's odd generation
        data[offset:offset + size] = value
    if kind == 4:
        data = bytearray(mutate_bytes(rng, data, text=False))
    return bytes(data)


# --- checks -------------------------------------------------------------------------------------

class Outcome:
    def __init__(self, status, stdout, stderr, seconds):
        self.status, self.stdout, self.stderr, self.seconds = status, stdout, stderr, seconds


def run_in_process(module, argv) -> Outcome:
    stdout, stderr = io.StringIO(), io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        status = module.run(argv)
    return Outcome(status, stdout.getvalue(), stderr.getvalue(), time.monotonic() - started)


def run_process(script, argv) -> Outcome:
    started = time.monotonic()
    proc = subprocess.run(t.python_command(script, *argv), capture_output=True, timeout=CASE_SECONDS * 3)
    return Outcome(proc.returncode, proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8"),
                   time.monotonic() - started)


class FuzzTestCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="gpumem-fuzz-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", self.tmp], check=False))

    def check(self, outcome: Outcome, what: str, output: str) -> None:
        """What every run must give: `output` is "text", "json" or "prometheus"."""
        described = (f"{what}\nexit {outcome.status} after {outcome.seconds:.1f} s\n--- stdout\n{outcome.stdout[:2000]}"
                     f"--- stderr\n{outcome.stderr}")
        self.assertIn(outcome.status, (0, 1, 2), described)
        self.assertNotIn("Traceback", outcome.stderr, described)
        self.assertLessEqual(len(outcome.stderr.splitlines()), 2, described)
        self.assertEqual(t.unsafe_characters(outcome.stderr), [], described)
        self.assertLess(outcome.seconds, CASE_SECONDS, described)
        if outcome.status != 0:
            self.assertTrue(outcome.stderr, described)
            return
        if output == "json":
            self.assertTrue(outcome.stdout.isascii(), described)
            json.loads(outcome.stdout)
        elif output == "prometheus":
            try:
                parse_exposition(outcome.stdout)
            except ExpositionError as error:
                self.fail(f"{error}\n{described}")
        else:
            self.assertEqual(t.unsafe_characters(outcome.stdout), [], described)

    def fuzz(self, module, script, make_input, arguments, cases, process_cases):
        """`cases` inputs through `module` in this process, then `process_cases` more through `script`
        run as a process (two at a time). arguments(rng, path) -> (argv, output kind)."""
        rng = random.Random(f"{SEED}:{script}")
        runs = []
        for case in range(cases + process_cases):
            path = os.path.join(self.tmp, f"input-{case}")
            with open(path, "wb") as f:
                f.write(make_input(rng, case))
            argv, output = arguments(rng, path)
            runs.append((case, path, argv, output))
        for case, path, argv, output in runs[:cases]:
            try:
                outcome = run_in_process(module, argv)
            except BaseException as error:  # anything the script let out: the input stays in self.tmp's copy
                with open(path, "rb") as f:
                    data = f.read()
                self.fail(f"seed {SEED}, case {case}: {argv} raised {error!r}; input {data[:300]!r}")
            self.check(outcome, f"seed {SEED}, case {case} in process: {argv}", output)

        def one(run):
            return run, run_process(script, run[2])
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            for (case, path, argv, output), outcome in pool.map(one, runs[cases:]):
                self.check(outcome, f"seed {SEED}, case {case} as a process: {argv}", output)


class HelpersTest(unittest.TestCase):
    """The three scripts, each installed alone, carry the same helpers for untrusted input."""

    def test_the_helpers_are_the_same(self):
        for name in ("file_kind", "open_untrusted", "escaped_character", "printable"):
            with self.subTest(helper=name):
                sources = {inspect.getsource(getattr(module, name)) for module in (REPORT, PLOT, TOP)}
                self.assertEqual(len(sources), 1)
        for name in ("path_text", "write_out"):
            self.assertEqual(inspect.getsource(getattr(REPORT, name)), inspect.getsource(getattr(TOP, name)))

    def test_printable_leaves_nothing_for_a_terminal(self):
        rng = random.Random(SEED)
        alphabet = [chr(c) for c in range(0x00, 0x250)] + ["\u2028", "\u202e", "\ufeff", "\ud800", "\udcff",
                                                          "\U0001f600", "\U000e0001", "\\"]
        for _ in range(2000):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20)))
            shown = REPORT.printable(text)
            self.assertEqual(t.unsafe_characters(shown), [], repr(text))
            shown.encode("utf-8")  # no lone surrogate left
            self.assertTrue(shown.isprintable(), repr(text))
            if text.isprintable():
                self.assertEqual(shown, text)


class ReportFuzzTest(FuzzTestCase):
    def test_random_statistics_files(self):
        good = os.path.join(self.tmp, "good.json")
        with open(good, "w") as f:
            json.dump(stats_documents()[0], f)

        def arguments(rng, path):
            json_mode = rng.random() < 0.5
            files = [path] + ([good] if rng.random() < 0.3 else [])
            return (["--json"] if json_mode else []) + files, "json" if json_mode else "text"
        self.fuzz(REPORT, t.REPORT, stats_input, arguments, IN_PROCESS_CASES, PROCESS_CASES)


class PlotFuzzTest(FuzzTestCase):
    def test_random_traces(self):
        def arguments(rng, path):
            argv = [path, "--text"]
            if rng.random() < 0.3:
                argv += ["--perfetto", path + ".json"]
            if rng.random() < 0.15:  # several traces on one clock
                argv.insert(0, path)
            return argv, "text"
        self.fuzz(PLOT, t.PLOT, trace_input, arguments, IN_PROCESS_CASES, PROCESS_CASES)
        for name in os.listdir(self.tmp):  # what it wrote is JSON
            if name.endswith(".json"):
                with open(os.path.join(self.tmp, name)) as f:
                    json.load(f)


class TopFuzzTest(FuzzTestCase):
    def test_random_ledgers(self):
        modes = (("--once", "text"), ("--json", "json"), ("--prometheus", "prometheus"))

        def arguments(rng, path):
            # Each input alone in a folder, under the name its intact header would give it.
            folder = path + ".d"
            os.mkdir(folder)
            os.rename(path, os.path.join(folder, t.ledger_name(LEDGER_UUID)))
            mode, output = rng.choice(modes)
            return [mode, "--dir", folder], output

        def make_input(rng, case):
            data = ledger_input(rng, case)
            if case >= IN_PROCESS_CASES and len(data) >= 56:  # as a process, mid-update costs 0.15 s: few are
                generation = int.from_bytes(data[48:56], "little")
                data = data[:48] + (generation & ~1 if case % 4 else generation).to_bytes(8, "little") + data[56:]
            return data
        self.fuzz(TOP, t.TOP, make_input, arguments, IN_PROCESS_CASES, PROCESS_CASES)


if __name__ == "__main__":
    print(f"seed {SEED}, {IN_PROCESS_CASES} + {PROCESS_CASES} cases per tool", file=sys.stderr)
    unittest.main(verbosity=2)
