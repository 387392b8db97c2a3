"""scripts/gpumem-plot: reads allocation traces (gpumem's GPUMEM_TRACE columns and RMM's own replay
log) and draws them as a PNG, a Perfetto (Chrome trace-event) JSON file and a terminal chart.

The traces are synthetic, written here with known peaks, so every figure the script prints can be
checked exactly. No GPU, simulator or build is needed: the script runs from the source tree.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest

from tools_testlib import BROKEN_PIPE_STATUS, run_closed_stdout, unsafe_characters

SOURCE_ROOT = os.environ.get("GPUMEM_TEST_SOURCE_ROOT",
                             os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
# The script under test: the source tree's unless GPUMEM_TEST_PLOT names another (an installed copy).
PLOT = os.environ.get("GPUMEM_TEST_PLOT") or os.path.join(SOURCE_ROOT, "scripts", "gpumem-plot")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
GPUMEM_HEADER = "Thread,Time,Action,Pointer,Size,Stream,Device,Reserved,Limit"
MiB = 1 << 20
GiB = 1 << 30
T0 = 1764047045.0
SUMMARY = re.compile(r"^device (?P<device>\d+): (?P<allocs>\d+) allocations, (?P<frees>\d+) frees, "
                     r"(?P<refusals>\d+) refusals, peak in use (?P<peak>\d+) bytes at (?P<at>[0-9.]+) s, "
                     r"peak reserved (?P<reserved>\d+ bytes|unknown), limit (?P<limit>\d+ bytes|unknown)"
                     r"(?P<rest>.*)$")


def run_plot(*args, env=None, timeout=120):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([PLOT, *map(str, args)], capture_output=True, text=True, env=full_env,
                          timeout=timeout)


def summaries(stdout: str) -> dict:
    return {int(m["device"]): m for line in stdout.splitlines() if (m := SUMMARY.match(line))}


def gpumem_row(t, action, pointer, size, device=0, reserved="", limit=""):
    return f"4021,{T0 + t:.6f},{action},{pointer:#x},{size},0,{device},{reserved},{limit}"


def two_device_trace():
    """Device 0 grows to a 96 MiB peak in use (32 + 16 + 40 - 16 + 24, at t=0.3) inside 128 MiB reserved, limit 160 MiB, with
    two refusals (one larger than the limit); device 1 peaks at 40 MiB at t=0.5, one refusal."""
    limit0, limit1 = 160 * MiB, 1 * GiB
    rows = [GPUMEM_HEADER,
            gpumem_row(0.000, "allocate", 0x7f0000000000, 32 * MiB, 0, 64 * MiB, limit0),
            gpumem_row(0.100, "allocate", 0x7f0002000000, 16 * MiB, 0, 64 * MiB, limit0),
            gpumem_row(0.150, "allocate", 0x7e0000000000, 8 * MiB, 1, "", limit1),
            gpumem_row(0.200, "allocate", 0x7f0004000000, 40 * MiB, 0, 128 * MiB, limit0),
            gpumem_row(0.300, "free", 0x7f0002000000, 16 * MiB, 0, 128 * MiB, limit0),
            gpumem_row(0.300, "allocate", 0x7f0010000000, 24 * MiB, 0, 128 * MiB, limit0),
            gpumem_row(0.350, "allocate failure", 0, 64 * MiB, 0, 128 * MiB, limit0),
            gpumem_row(0.400, "allocate", 0x7e0001000000, 32 * MiB, 1, "", limit1),
            gpumem_row(0.450, "allocate failure", 0, 99999999999, 0, 128 * MiB, limit0),
            gpumem_row(0.500, "free", 0x7f0004000000, 40 * MiB, 0, 128 * MiB, limit0),
            gpumem_row(0.500, "allocate failure", 0, 2 * GiB, 1, "", limit1),
            gpumem_row(0.600, "free", 0x7e0000000000, 8 * MiB, 1, "", limit1),
            gpumem_row(0.700, "free", 0x7f0000000000, 32 * MiB, 0, 128 * MiB, limit0),
            gpumem_row(0.800, "free", 0x7f0010000000, 24 * MiB, 0, 128 * MiB, limit0),
            gpumem_row(0.900, "free", 0x7e0001000000, 32 * MiB, 1, "", limit1)]
    return "\n".join(rows) + "\n"


# RMM's logging_resource_adaptor: six columns, clock time of day, here crossing midnight.
RMM_TRACE = """Thread,Time,Action,Pointer,Size,Stream
140213,23:59:59.500000,allocate,0x7fa200000000,1048576,0x0
140213,23:59:59.750000,allocate,0x7fa200100000,3145728,0x0
140213,23:59:59.900000,free,0x7fa200000000,1048576,0x0
140214,00:00:00.250000,allocate,0x7fa200400000,2097152,0x0
140214,00:00:00.500000,free,0x7fa200100000,3145728,0x0
140214,00:00:00.750000,free,0x7fa200400000,2097152,0x0
"""


def matplotlib_missing_reason():
    """Why the PNG cannot be drawn here (None when it can): the script says so in one line."""
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "t.csv")
        with open(trace, "w") as f:
            f.write(RMM_TRACE)
        proc = run_plot(trace, "-o", os.path.join(tmp, "t.png"))
        return None if proc.returncode == 0 else proc.stderr.strip()


MATPLOTLIB_MISSING = matplotlib_missing_reason()


def load_plot_module():
    """The script as a module, to check what it would draw (labels, panels) without reading pixels."""
    import importlib.machinery
    import importlib.util
    loader = importlib.machinery.SourceFileLoader("gpumem_plot", PLOT)
    spec = importlib.util.spec_from_loader("gpumem_plot", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


class PlotTestCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="gpumem-plot-test-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", self.tmp], check=False))

    def path(self, name):
        return os.path.join(self.tmp, name)

    def write(self, name, text):
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    def describe(self, proc):
        return f"$ {' '.join(proc.args)}\nexit {proc.returncode}\n--- stdout\n{proc.stdout}--- stderr\n{proc.stderr}"

    def assertOneLineError(self, proc, status, *phrases):
        self.assertEqual(proc.returncode, status, self.describe(proc))
        lines = proc.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, self.describe(proc))
        self.assertTrue(lines[0].startswith("gpumem-plot: "), self.describe(proc))
        self.assertNotIn("Traceback", proc.stderr)
        for phrase in phrases:
            self.assertIn(phrase, lines[0], self.describe(proc))

    def assertPng(self, path):
        with open(path, "rb") as f:
            data = f.read()
        self.assertEqual(data[:8], PNG_SIGNATURE, path)
        self.assertGreater(len(data), 10_000, f"{path}: only {len(data)} bytes")
        # IHDR: width and height, big-endian, right after the signature and the chunk header.
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        self.assertGreaterEqual(width, 800)
        self.assertGreaterEqual(height, 300)
        return width, height

    def perfetto(self, path):
        with open(path) as f:
            document = json.load(f)
        events = document["traceEvents"]
        counters, instants = {}, {}
        for event in events:
            if event["ph"] == "C":
                self.assertIsInstance(event["ts"], (int, float))
                self.assertEqual(event["name"], f"device {event['pid']}")
                counters.setdefault(event["pid"], []).append(event)
            elif event["ph"] == "i":
                instants.setdefault(event["pid"], []).append(event)
        return counters, instants


class PlotOutputTest(PlotTestCase):
    def test_script_is_executable(self):
        self.assertTrue(os.access(PLOT, os.X_OK), PLOT)

    def test_summary_counts_and_peaks(self):
        trace = self.write("two.csv", two_device_trace())
        proc = run_plot(trace, "--text")
        self.assertEqual(proc.returncode, 0, self.describe(proc))
        found = summaries(proc.stdout)
        self.assertEqual(sorted(found), [0, 1], proc.stdout)
        d0, d1 = found[0], found[1]
        self.assertEqual((d0["allocs"], d0["frees"], d0["refusals"]), ("4", "4", "2"))
        self.assertEqual(int(d0["peak"]), 96 * MiB)
        self.assertAlmostEqual(float(d0["at"]), 0.3, places=5)
        self.assertEqual(d0["reserved"], f"{128 * MiB} bytes")
        self.assertEqual(d0["limit"], f"{160 * MiB} bytes")
        self.assertEqual((d1["allocs"], d1["frees"], d1["refusals"]), ("2", "2", "1"))
        self.assertEqual(int(d1["peak"]), 40 * MiB)
        self.assertAlmostEqual(float(d1["at"]), 0.4, places=5)
        self.assertEqual(d1["reserved"], "unknown")  # an empty Reserved column: not drawn
        self.assertEqual(d1["limit"], f"{GiB} bytes")

    def test_text_chart_shows_the_peak(self):
        trace = self.write("two.csv", two_device_trace())
        proc = run_plot(trace, "--text")
        self.assertEqual(proc.returncode, 0, self.describe(proc))
        charts = proc.stdout.split("\n\n", 1)[1]  # after the summary lines
        self.assertIn(f"peak in use 96.0 MiB ({96 * MiB} bytes)", charts)
        self.assertIn(f"peak in use 40.0 MiB ({40 * MiB} bytes)", charts)
        self.assertIn("limit 160.0 MiB", charts)
        chart_rows = [line for line in charts.splitlines() if re.match(r"^ {0,10}\S* ?\S* \|", line)]
        self.assertEqual(len(chart_rows), 20, charts)  # 10 rows per device
        for row in chart_rows:
            self.assertEqual(len(row.split("|", 1)[1]), 64, row)
        self.assertIn("=", charts)  # device 0's limit is near its peak: drawn
        self.assertRegex(charts, r"\+-*x-*x-*")  # two refusals on device 0's time axis

    def test_perfetto_counters(self):
        trace = self.write("two.csv", two_device_trace())
        out = self.path("two.json")
        proc = run_plot(trace, "--perfetto", out)
        self.assertEqual(proc.returncode, 0, self.describe(proc))
        counters, instants = self.perfetto(out)
        self.assertEqual(sorted(counters), [0, 1])
        self.assertEqual(max(e["args"]["in_use"] for e in counters[0]), 96 * MiB)
        self.assertEqual(max(e["args"]["in_use"] for e in counters[1]), 40 * MiB)
        self.assertEqual(max(e["args"]["reserved"] for e in counters[0]), 128 * MiB)
        self.assertTrue(all("reserved" not in e["args"] for e in counters[1]))
        self.assertEqual(len(instants.get(0, [])), 2)
        self.assertEqual(len(instants.get(1, [])), 1)
        # Microseconds since the first row.
        self.assertEqual(min(e["ts"] for e in counters[0]), 0)
        self.assertAlmostEqual(max(e["ts"] for e in counters[0]), 900_000, delta=1)

    @unittest.skipIf(MATPLOTLIB_MISSING, f"no matplotlib: {MATPLOTLIB_MISSING}")
    def test_png_of_a_preallocated_arena_scales_in_use_on_its_own(self):
        # The default policy: 12 GiB reserved at the first allocation, a few MiB in use. On the
        # reservation's scale in use would be a flat line at zero: it gets a scale of its own.
        rows = [GPUMEM_HEADER]
        for i in range(20):
            rows.append(gpumem_row(i * 0.01, "allocate", 0x7f0000000000 + i * 0x100000, MiB, 0, 12 * GiB, 12 * GiB))
        trace = self.write("preallocated.csv", "\n".join(rows) + "\n")
        out = self.path("preallocated.png")
        proc = run_plot(trace, "-o", out)
        self.assertEqual(proc.returncode, 0, self.describe(proc))
        self.assertPng(out)
        self.assertIn("device 0: in use drawn in a panel of its own, below: the device reserved 614 times its peak "
                      "in use", proc.stdout)
        # Reserved close to what is in use: one panel.
        proc = run_plot(self.write("growth.csv", two_device_trace()), "-o", self.path("growth.png"))
        self.assertNotIn("panel of its own", proc.stdout)

    @unittest.skipIf(MATPLOTLIB_MISSING, f"no matplotlib: {MATPLOTLIB_MISSING}")
    def test_png(self):
        trace = self.write("two.csv", two_device_trace())
        out = self.path("timeline.png")
        proc = run_plot(trace, "-o", out, "--title", "two devices")
        self.assertEqual(proc.returncode, 0, self.describe(proc))
        _, height = self.assertPng(out)
        self.assertEqual(int(summaries(proc.stdout)[0]["peak"]), 96 * MiB)
        # One subplot per device: two devices draw a taller figure than one.
        lines = two_device_trace().splitlines()
        one = self.write("one.csv", "\n".join([lines[0]] + [line for line in lines[1:]
                                                             if line.split(",")[6] == "0"]) + "\n")
        proc = run_plot(one, "-o", self.path("one.png"))
        self.assertEqual(proc.returncode, 0, self.describe(proc))
        self.assertEqual(sorted(summaries(proc.stdout)), [0])
        _, one_height = self.assertPng(self.path("one.png"))
        self.assertGreater(height, one_height)

    def test_rmm_replay_log(self):
        trace = self.write("rmm.csv", RMM_TRACE)
        proc = run_plot(trace, "--text", "--perfetto", self.path("rmm.json"))
        self.assertEqual(proc.returncode, 0, self.describe(proc))
        found = summaries(proc.stdout)
        self.assertEqual(sorted(found), [0])  # no Device column: device 0
        d0 = found[0]
        self.assertEqual((d0["allocs"], d0["frees"], d0["refusals"]), ("3", "3", "0"))
        self.assertEqual(int(d0["peak"]), 5 * MiB)  # 3 MiB + 2 MiB, after midnight
        self.assertAlmostEqual(float(d0["at"]), 0.75, places=5)
        self.assertEqual((d0["reserved"], d0["limit"]), ("unknown", "unknown"))
        self.assertIn(f"({5 * MiB} bytes)", proc.stdout)
        counters, _ = self.perfetto(self.path("rmm.json"))
        self.assertEqual(max(e["args"]["in_use"] for e in counters[0]), 5 * MiB)
        self.assertAlmostEqual(max(e["ts"] for e in counters[0]), 1_250_000, delta=1)
        if not MATPLOTLIB_MISSING:
            proc = run_plot(trace, "-o", self.path("rmm.png"))
            self.assertEqual(proc.returncode, 0, self.describe(proc))
            self.assertPng(self.path("rmm.png"))

    def test_columns_by_name(self):
        # Another order, an extra column, "deallocate", a free of a pointer never allocated.
        trace = self.write("shuffled.csv", "\n".join([
            "Size,Comment,Pointer,Action,Time,Stream,Thread,Device",
            "1024,first,0x1000,allocate,10.0,0,1,2",
            "4096,,0x2000,allocate,10.5,0,1,2",
            "1024,,0x1000,deallocate,11.0,0,1,2",
            "512,stray,0x9000,free,11.5,0,1,2",
            "4096,,0x2000,free,12.0,0,1,2",
        ]) + "\n")
        proc = run_plot(trace, "--text")
        self.assertEqual(proc.returncode, 0, self.describe(proc))
        d2 = summaries(proc.stdout)[2]
        self.assertEqual((d2["allocs"], d2["frees"], d2["refusals"]), ("2", "2", "0"))
        self.assertEqual(int(d2["peak"]), 5120)
        self.assertIn("1 frees of pointers not live, ignored", d2["rest"])

    def test_large_trace_keeps_the_exact_peak(self):
        # 300k rows of churn around 64 MiB, and one 1 GiB spike in the middle that lasts one event.
        rows = [GPUMEM_HEADER]
        live = []
        spike_at = 150_000
        for i in range(300_000):
            t = i * 1e-5
            if i == spike_at:
                rows.append(gpumem_row(t, "allocate", 0x7000_0000_0000, GiB, 0, 2 * GiB, 4 * GiB))
            elif i == spike_at + 1:
                rows.append(gpumem_row(t, "free", 0x7000_0000_0000, GiB, 0, 2 * GiB, 4 * GiB))
            elif len(live) < 64 or i % 2:
                pointer = 0x7100_0000_0000 + i * 0x100000
                live.append(pointer)
                rows.append(gpumem_row(t, "allocate", pointer, MiB, 0, 2 * GiB, 4 * GiB))
            else:
                rows.append(gpumem_row(t, "free", live.pop(0), MiB, 0, 2 * GiB, 4 * GiB))
        in_use = 0
        peak = 0
        sizes = {}
        for row in rows[1:]:  # the expected peak, computed independently
            fields = row.split(",")
            if fields[2] == "allocate":
                sizes[fields[3]] = int(fields[4])
                in_use += int(fields[4])
            else:
                in_use -= sizes.pop(fields[3])
            peak = max(peak, in_use)
        trace = self.write("large.csv", "\n".join(rows) + "\n")
        outputs = ["--perfetto", self.path("large.json"), "--text"]
        if not MATPLOTLIB_MISSING:
            outputs += ["-o", self.path("large.png")]
        start = time.monotonic()
        proc = run_plot(trace, *outputs, timeout=300)
        elapsed = time.monotonic() - start
        self.assertEqual(proc.returncode, 0, self.describe(proc))
        self.assertLess(elapsed, 120, "300k rows took minutes")
        self.assertEqual(int(summaries(proc.stdout)[0]["peak"]), peak)
        counters, _ = self.perfetto(self.path("large.json"))
        self.assertLess(len(counters[0]), 100_000, "the counters were not thinned")
        self.assertEqual(max(e["args"]["in_use"] for e in counters[0]), peak)
        if not MATPLOTLIB_MISSING:
            self.assertPng(self.path("large.png"))


class PlotSeveralTracesTest(PlotTestCase):
    """The ranks of a job, one trace each (GPUMEM_TRACE=trace.%r.csv), on one time axis."""

    def rank_trace(self, name, start, peak, hold):
        """One device: a block of `peak` bytes allocated at T0 + start and freed `hold` s later."""
        return self.write(name, "\n".join([
            GPUMEM_HEADER,
            gpumem_row(start, "allocate", 0x7f0000000000, peak, 0, peak, GiB),
            gpumem_row(start + hold, "free", 0x7f0000000000, peak, 0, peak, GiB)]) + "\n")

    def test_ranks_share_one_clock(self):
        first = self.rank_trace("rank0.csv", 0.0, 64 * MiB, 1.0)
        second = self.rank_trace("rank1.csv", 0.5, 32 * MiB, 1.0)
        out = self.path("job.json")
        proc = run_plot(first, second, "--text", "--perfetto", out)
        self.assertEqual(proc.returncode, 0, self.describe(proc))
        lines = [line for line in proc.stdout.splitlines() if " allocations, " in line]
        self.assertEqual(len(lines), 2, proc.stdout)
        self.assertTrue(lines[0].startswith("rank0.csv device 0: 1 allocations"), lines[0])
        self.assertIn(f"peak in use {64 * MiB} bytes at 0.000000 s", lines[0])
        # The second rank's peak at its own time on the common clock: half a second after the first's.
        self.assertTrue(lines[1].startswith("rank1.csv device 0: 1 allocations"), lines[1])
        self.assertIn(f"peak in use {32 * MiB} bytes at 0.500000 s", lines[1])
        self.assertIn("rank1.csv device 0 over 1.5 s", proc.stdout)
        with open(out) as f:
            events = json.load(f)["traceEvents"]
        names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
        self.assertEqual(sorted(names.values()), ["rank0.csv device 0", "rank1.csv device 0"])
        by_track = {}
        for event in events:
            if event["ph"] == "C":
                by_track.setdefault(event["name"], []).append(event)
        # Both tracks run to the end of the later trace (1.5 s), each rising when its rank allocated.
        for name, start in (("rank0.csv device 0", 0), ("rank1.csv device 0", 500_000)):
            track = by_track[name]
            self.assertAlmostEqual(max(e["ts"] for e in track), 1_500_000, delta=1)
            rise = min(e["ts"] for e in track if e["args"]["in_use"] > 0)
            self.assertAlmostEqual(rise, start, delta=1)

    @unittest.skipIf(MATPLOTLIB_MISSING, f"no matplotlib: {MATPLOTLIB_MISSING}")
    def test_png_of_several_ranks(self):
        first = self.rank_trace("rank0.csv", 0.0, 64 * MiB, 1.0)
        second = self.rank_trace("rank1.csv", 0.2, 32 * MiB, 1.0)
        png = self.path("job.png")
        proc = run_plot(first, second, "-o", png)
        self.assertEqual(proc.returncode, 0, self.describe(proc))
        width, height = self.assertPng(png)
        self.assertGreater(height, width * 0.6)  # one panel per rank's device

    def test_a_limit_that_moves_is_drawn_as_it_moved(self):
        """Two processes sharing a GPU (GPUMEM_SHARE=auto): the first's budget falls from 96 MiB to
        48 MiB when the second joins, and the second's rises to 48 MiB; each trace's Limit column says so."""
        lender = self.write("lender.csv", "\n".join([
            GPUMEM_HEADER,
            gpumem_row(0.0, "allocate", 0x7f0000000000, 24 * MiB, 0, 24 * MiB, 96 * MiB),
            gpumem_row(1.0, "allocate", 0x7f0002000000, 8 * MiB, 0, 32 * MiB, 48 * MiB),
            gpumem_row(2.0, "free", 0x7f0002000000, 8 * MiB, 0, 32 * MiB, 48 * MiB)]) + "\n")
        joiner = self.write("joiner.csv", "\n".join([
            GPUMEM_HEADER,
            gpumem_row(1.0, "allocate", 0x7e0000000000, 16 * MiB, 0, 16 * MiB, 48 * MiB),
            gpumem_row(2.0, "free", 0x7e0000000000, 16 * MiB, 0, 16 * MiB, 48 * MiB)]) + "\n")
        out = self.path("shared.json")
        proc = run_plot(lender, joiner, "--text", "--perfetto", out)
        self.assertEqual(proc.returncode, 0, self.describe(proc))
        lines = [line for line in proc.stdout.splitlines() if " allocations, " in line]
        self.assertIn(f"limit {48 * MiB} bytes (it moved 1 times, between {48 * MiB} and {96 * MiB})", lines[0])
        self.assertNotIn("moved", lines[1])
        # The lender's chart: its limit row ('=') is higher in the first half than in the second.
        chart = proc.stdout.split("lender.csv device 0 over", 1)[1].split("joiner.csv", 1)[0]
        rows = [line.split("|", 1)[1] for line in chart.splitlines() if "|" in line]
        limit_rows = [[i for i, row in enumerate(rows) if len(row) > c and row[c] == "="] for c in (2, len(rows[0]) - 3)]
        self.assertTrue(limit_rows[0] and limit_rows[1], chart)
        self.assertLess(limit_rows[0][0], limit_rows[1][0], chart)  # row 0 is the top
        with open(out) as f:
            events = json.load(f)["traceEvents"]
        limits = sorted({(e["ts"], e["args"]["limit"]) for e in events
                         if e["ph"] == "C" and e["name"] == "lender.csv device 0" and "limit" in e["args"]})
        self.assertEqual(limits[0][1], 96 * MiB)
        self.assertEqual(limits[-1][1], 48 * MiB)

    def test_times_of_day_cannot_share_a_clock(self):
        first = self.rank_trace("rank0.csv", 0.0, 64 * MiB, 1.0)
        rmm = self.write("rmm.csv", "Thread,Time,Action,Pointer,Size,Stream\n1,14:03:07.000000,allocate,0x10,16,0\n")
        proc = run_plot(first, rmm, "--text")
        self.assertOneLineError(proc, 1, "rmm.csv", "seconds since the epoch")


class PlotErrorTest(PlotTestCase):
    def check_bad_trace(self, text, *phrases):
        trace = self.write("bad.csv", text)
        proc = run_plot(trace, "--text")
        self.assertOneLineError(proc, 1, "bad.csv", *phrases)
        self.assertNotIn("device 0:", proc.stdout)

    def test_malformed_traces(self):
        good = two_device_trace().splitlines()
        cases = {
            "empty": ("", ["empty file"]),
            "header only": (GPUMEM_HEADER + "\n", ["no events"]),
            "missing column": ("Thread,Time,Action,Pointer,Size\n1,1.0,allocate,0x10,16\n",
                               ["line 1", "Stream"]),
            "bad size": ("\n".join(good[:3] + [good[3].replace(str(8 * MiB), "8MiB")]) + "\n",
                         ["line 4, column Size", "8MiB"]),
            "negative size": ("\n".join(good[:2] + [good[2].replace(str(16 * MiB), "-5")]) + "\n",
                              ["line 3, column Size"]),
            "bad time": ("\n".join(good[:2] + ["4021,yesterday,allocate,0x10,16,0,0,,"]) + "\n",
                         ["line 3, column Time", "yesterday"]),
            "bad action": ("\n".join(good[:2] + [good[2].replace("allocate", "alloc")]) + "\n",
                           ["line 3, column Action", "alloc"]),
            "bad pointer": ("\n".join(good[:5] + [good[5].replace("0x7f0002000000", "0xnope")]) + "\n",
                            ["line 6, column Pointer"]),
            "bad device": ("\n".join(good[:2] + [gpumem_row(0.1, "allocate", 16, 16, "gpu1")]) + "\n",
                           ["line 3, column Device"]),
            "bad reserved": ("\n".join(good[:2] + [gpumem_row(0.1, "allocate", 16, 16, 0, "lots")]) + "\n",
                             ["line 3, column Reserved"]),
            "short row": ("\n".join(good[:3] + ["4021,1.0,allocate"]) + "\n", ["line 4", "fields"]),
        }
        for name, (text, phrases) in cases.items():
            with self.subTest(case=name):
                self.check_bad_trace(text, *phrases)

    def test_bad_arguments(self):
        trace = self.write("two.csv", two_device_trace())
        cases = {
            "no arguments": ([], ["required"]),
            "no output": ([trace], ["-o", "--perfetto", "--text"]),
            "missing trace": ([self.path("absent.csv"), "--text"], ["absent.csv", "No such file"]),
            "trace is a folder": ([self.tmp, "--text"], ["folder"]),
            "unknown option": ([trace, "--text", "--colour"], ["--colour"]),
            "output folder missing": ([trace, "-o", self.path("no/such/dir/t.png")], ["-o", "no/such/dir"]),
            "perfetto folder missing": ([trace, "--perfetto", self.path("nowhere/t.json")], ["--perfetto"]),
            "-o without a value": ([trace, "-o"], ["-o"]),
        }
        for name, (args, phrases) in cases.items():
            with self.subTest(case=name):
                proc = run_plot(*args)
                self.assertOneLineError(proc, 2, *phrases)
                self.assertEqual(proc.stdout, "")

    def test_help(self):
        proc = run_plot("--help")
        self.assertEqual(proc.returncode, 0, self.describe(proc))
        self.assertIn("usage: gpumem-plot", proc.stdout)

    def test_without_matplotlib(self):
        # A matplotlib that cannot be imported, first on the path of every interpreter the script
        # may use: the PNG is refused in one line, the other outputs are still written.
        fake = os.path.join(self.tmp, "fake")
        os.makedirs(os.path.join(fake, "matplotlib"))
        with open(os.path.join(fake, "matplotlib", "__init__.py"), "w") as f:
            f.write("raise ImportError('matplotlib is hidden by the test')\n")
        env = {"PYTHONPATH": fake}
        trace = self.write("two.csv", two_device_trace())
        proc = run_plot(trace, "-o", self.path("t.png"), env=env)
        self.assertOneLineError(proc, 1, "python3-matplotlib")
        self.assertFalse(os.path.exists(self.path("t.png")))
        proc = run_plot(trace, "--text", "--perfetto", self.path("t.json"), env=env)
        self.assertEqual(proc.returncode, 0, self.describe(proc))
        self.assertIn(f"({96 * MiB} bytes)", proc.stdout)
        counters, _ = self.perfetto(self.path("t.json"))
        self.assertEqual(max(e["args"]["in_use"] for e in counters[0]), 96 * MiB)
        # Asked for all three: the text and the JSON come out, then the one-line refusal.
        proc = run_plot(trace, "--text", "-o", self.path("t.png"), env=env)
        self.assertOneLineError(proc, 1, "python3-matplotlib")
        self.assertIn(f"({96 * MiB} bytes)", proc.stdout)


class PlotHostileTraceTest(PlotTestCase):
    """Traces made to break the script or the terminal it prints on: each is named in one line (never a
    traceback), sums are bounded, nothing waits, nothing reaches the terminal raw."""

    def check_bad_trace(self, rows, *phrases):
        trace = self.write("bad.csv", "\n".join([GPUMEM_HEADER] + rows) + "\n")
        proc = run_plot(trace, "--text", "--perfetto", self.path("bad.json"))
        self.assertOneLineError(proc, 1, "bad.csv", *phrases)
        self.assertEqual(unsafe_characters(proc.stderr), [], proc.stderr)

    def test_sizes_past_2_63(self):
        # Two blocks of 2^63 - 1 bytes live at once: 2^64 - 2 in use, exactly.
        half = (1 << 63) - 1
        trace = self.write("big.csv", "\n".join([
            GPUMEM_HEADER,
            gpumem_row(0.0, "allocate", 0x10, half, 0, 1 << 63, (1 << 64) - 1),
            gpumem_row(0.1, "allocate", 0x20, half, 0, (1 << 64) - 1, (1 << 64) - 1),
            gpumem_row(0.2, "free", 0x10, half, 0, 1 << 63, (1 << 64) - 1)]) + "\n")
        proc = run_plot(trace, "--text", "--perfetto", self.path("big.json"))
        self.assertEqual(proc.returncode, 0, self.describe(proc))
        summary = summaries(proc.stdout)[0]
        self.assertEqual(int(summary["peak"]), 2 * half)
        self.assertEqual(summary["reserved"], f"{(1 << 64) - 1} bytes")
        counters, _ = self.perfetto(self.path("big.json"))
        self.assertEqual(max(e["args"]["in_use"] for e in counters[0]), 2 * half)
        if MATPLOTLIB_MISSING is None:
            proc = run_plot(trace, "-o", self.path("big.png"))
            self.assertEqual(proc.returncode, 0, self.describe(proc))
            self.assertPng(self.path("big.png"))

    def test_values_out_of_bounds_are_one_line(self):
        cases = {
            "blocks summing to 2^64": ([gpumem_row(0.0, "allocate", 0x10, (1 << 64) - 1),
                                        gpumem_row(0.1, "allocate", 0x20, 1)],
                                       ["line 3", "would sum to 2^64 bytes or more"]),
            "a size of 2^64": ([gpumem_row(0.0, "allocate", 0x10, 1 << 64)], ["line 2, column Size", "2^64 - 1"]),
            "a limit of 10^30": ([gpumem_row(0.0, "allocate", 0x10, 1, 0, "", 10 ** 30)], ["line 2, column Limit"]),
            "a pointer past 64 bits": (["4021,1.0,allocate,0x10000000000000000,16,0,0,,"], ["column Pointer"]),
            "a time of 1e308": (["4021,1e308,allocate,0x10,16,0,0,,"], ["line 2, column Time", "1e308"]),
            "a negative time": (["4021,1.0,allocate,0x10,16,0,0,,", "4021,-1e308,allocate,0x20,16,0,0,,"],
                                ["line 3, column Time"]),
            "a time of NaN": (["4021,nan,allocate,0x10,16,0,0,,"], ["line 2, column Time"]),
            "a size with a sign": (["4021,1.0,allocate,0x10,+16,0,0,,"], ["line 2, column Size"]),
            "a size in other digits": (["4021,1.0,allocate,0x10,\u0661\u0662,0,0,,"], ["line 2, column Size"]),
            "257 devices": ([gpumem_row(0.0, "allocate", 0x10, 16, d) for d in range(257)],
                            ["line 258, column Device", "256"]),
            "a line of 100,000 characters": (["4021,1.0,allocate,0x10," + "1" * 100_000 + ",0,0,,"],
                                             ["line 2: longer than 65536 characters"]),
            "control characters": (["4021,1.0,\x1b[2J\x1b]0;owned\x07\x9b,0x10,16,0,0,,"],
                                   ["column Action", "'\\x1b[2J\\x1b]0;owned\\x07\\x9b'"]),
        }
        for name, (rows, phrases) in cases.items():
            with self.subTest(case=name):
                self.check_bad_trace(rows, *phrases)

    def test_traces_that_are_not_regular_files_are_refused_without_waiting(self):
        fifo = self.path("trace.csv")
        os.mkfifo(fifo)  # no writer: opening it to read would wait forever
        for path, kind in ((fifo, "is a FIFO"), ("/dev/zero", "is a character device")):
            with self.subTest(path=path):
                started = time.monotonic()
                proc = run_plot(path, "--text", timeout=20)
                self.assertOneLineError(proc, 2, f"TRACE '{path}' {kind}, not a regular file")
                self.assertLess(time.monotonic() - started, 10)

    def test_file_names_are_escaped(self):
        rows = two_device_trace()
        first = self.write("rank\x1b[2J\x9b.csv", rows)
        second = self.write("rank\u202e1.csv", rows)
        proc = run_plot(first, second, "--text")
        self.assertEqual(proc.returncode, 0, self.describe(proc))
        self.assertEqual(unsafe_characters(proc.stdout), [], proc.stdout)
        self.assertIn("rank\\x1b[2J\\x9b.csv device 0", proc.stdout)
        self.assertIn("rank\\u202e1.csv device 1", proc.stdout)

    def test_a_closed_pipe_is_quiet(self):
        trace = self.write("two.csv", two_device_trace())
        proc = run_closed_stdout([PLOT, trace, "--text"])
        self.assertEqual((proc.returncode, proc.stderr), (BROKEN_PIPE_STATUS, ""))


class LabelsFromTheTrace(PlotTestCase):
    """A timeline says what the trace says: a reservation is a preallocation only when the trace's Mode
    column says the arena preallocated; a growing arena's first reservation is never called one."""

    def trace(self, mode, first_reserved, peak_reserved):
        header = GPUMEM_HEADER + ("" if mode is None else ",Mode")
        rows = [header]
        for i, reserved in enumerate((first_reserved, peak_reserved, peak_reserved)):
            row = gpumem_row(i * 0.1, "allocate", 0x7f0000000000 + i * 0x1000000, MiB, 0, reserved, GiB)
            rows.append(row if mode is None else row + "," + (mode if i == 0 else ""))
        return self.write(f"trace-{mode}-{first_reserved}.csv", "\n".join(rows) + "\n")

    def device(self, path):
        plot = load_plot_module()
        devices, _, _, _ = plot.read_trace(path)
        return plot, devices[0]

    def test_a_growth_trace_is_not_called_preallocated(self):
        # A growing arena whose first step was 8 MiB and that never grew: not a preallocation.
        plot, device = self.device(self.trace("bfc growth", 8 * MiB, 8 * MiB))
        self.assertEqual(device.mode, "bfc growth")
        self.assertEqual(plot.reserved_label(device), "peak reserved 8.0 MiB (grown on demand)")

    def test_a_preallocated_trace_says_so(self):
        plot, device = self.device(self.trace("bfc preallocated", GiB, GiB))
        self.assertEqual(plot.reserved_label(device), "preallocated 1.0 GiB at the first allocation")

    def test_a_trace_that_does_not_say_gets_the_peak_alone(self):
        # An RMM log, or a trace written before the Mode column: nothing is guessed from the sizes.
        plot, device = self.device(self.trace(None, GiB, GiB))
        self.assertIsNone(device.mode)
        self.assertEqual(plot.reserved_label(device), "peak reserved 1.0 GiB")

    def test_a_preallocated_mode_whose_arena_grew_anyway_gets_the_peak(self):
        plot, device = self.device(self.trace("bfc preallocated", 8 * MiB, 512 * MiB))
        self.assertEqual(plot.reserved_label(device), "peak reserved 512.0 MiB")

    def test_in_use_far_below_the_reservation_gets_a_panel_of_its_own(self):
        # Never two value scales on one panel: the in-use peak (MiB) cannot sit on the limit line (GiB).
        plot, device = self.device(self.trace("bfc preallocated", GiB, GiB))
        self.assertEqual([role for _, role in plot.panels_of([device])], ["held", "in use"])
        _, close = self.device(self.write("close.csv", two_device_trace()))
        self.assertEqual([role for _, role in plot.panels_of([close])], ["both"])
        with open(PLOT, encoding="utf-8") as script:
            self.assertNotIn("twinx", script.read())

    def test_text_and_summary_read_traces_with_and_without_the_mode_column(self):
        for mode in (None, "bfc preallocated"):
            with self.subTest(mode=mode):
                proc = run_plot(self.trace(mode, GiB, GiB), "--text")
                self.assertEqual(proc.returncode, 0, self.describe(proc))
                self.assertEqual(int(summaries(proc.stdout)[0]["peak"]), 3 * MiB)

    @unittest.skipIf(MATPLOTLIB_MISSING, f"no matplotlib: {MATPLOTLIB_MISSING}")
    def test_png_of_one_and_two_panel_devices(self):
        trace = self.trace("bfc preallocated", GiB, GiB)
        proc = run_plot(trace, self.write("close.csv", two_device_trace()), "-o", self.path("mixed.png"))
        self.assertEqual(proc.returncode, 0, self.describe(proc))
        self.assertPng(self.path("mixed.png"))


if __name__ == "__main__":
    print(f"gpumem-plot: {PLOT} (python {sys.version.split()[0]})", file=sys.stderr)
    unittest.main(verbosity=2)
