"""Tests of gpumem-replay, the tool that replays an allocation trace through the BFC arena.

The built tool's path comes from GPUMEM_TEST_REPLAY. Each test writes a small trace, runs the tool on
it and checks the text report, the --json object, --min-limit, the limit and mode it chose from its
options and the environment, and its errors: one line naming the argument (status 2) or the trace's
line (status 1).
"""

import json
import random
import os
import subprocess
import tempfile
import unittest

TOOL = os.environ.get("GPUMEM_TEST_REPLAY", "")
MiB = 1 << 20
GiB = 1 << 30

GPUMEM_HEADER = "Thread,Time,Action,Pointer,Size,Stream,Device,Reserved,Limit"

# Peaks by hand: 1024 + 3072 rounded bytes in use at once (4000 requested); a refused request and a
# free of an unknown pointer are counted, not replayed.
SMALL_TRACE = "\n".join([
    GPUMEM_HEADER,
    "7,1764047045.000001,allocate,0x7f0000000000,1000,0x0,0,8388608,8388608",
    "7,1764047045.000002,allocate,0x7f0000000400,3000,0x0,0,8388608,8388608",
    "7,1764047045.000003,free,0x7f0000000000,1000,0x0,0,8388608,8388608",
    "7,1764047045.000004,allocate failure,0x0,99999999999,0x0,0,8388608,8388608",
    "7,1764047045.000005,free,0x7fffffff0000,0,0x0,0,8388608,8388608",
    "7,1764047045.000006,free,0x7f0000000400,3000,0x0,0,8388608,8388608",
]) + "\n"

# Three 1 MiB blocks; the first and last freed; then 2 MiB. Preallocated, 3 MiB leaves two separate
# 1 MiB holes; at 4 MiB the last hole merges with the unused MiB: the minimum limit is 4 MiB.
FRAGMENTING_TRACE = "\r\n".join([
    "Thread,Time,Action,Pointer,Size,Stream",
    "1,10:00:00.000001,allocate,0xa00000,1048576,0x0",
    "1,10:00:00.000002,allocate,0xb00000,1048576,0x0",
    "1,10:00:00.000003,allocate,0xc00000,1048576,0x0",
    "1,10:00:00.000004,free,0xa00000,1048576,0x0",
    "1,10:00:00.000005,free,0xc00000,1048576,0x0",
    "1,10:00:00.000006,allocate,0xd00000,2097152,0x0",
]) + "\r\n\r\n"

# Two devices; device 1 comes first.
TWO_DEVICE_TRACE = "\n".join([
    "Device,Thread,Time,Action,Pointer,Size,Stream,Limit",
    "1,1,1.0,allocate,0x100000,4096,0,16777216",
    "0,1,1.1,allocate,0x200000,8192,0,33554432",
    "0,1,1.2,allocate,0x300000,8192,0,33554432",
    "1,1,1.3,free,0x100000,4096,0,16777216",
]) + "\n"

REQUIRED_KEYS = {"peak_in_use", "peak_reserved", "utilisation", "driver_calls", "ns_per_op",
                 "peak_requested", "driver_releases", "operations", "failed", "skipped_failures",
                 "unmatched_frees", "device", "limit", "mode", "source", "split_rule", "min_growth",
                 "region_grows", "region_maps", "region_unmaps", "region_loans", "granule",
                 "peak_live_granules"}


def clean_environment() -> dict:
    """The test's environment without any variable the policy reads."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("GPUMEM_", "XLA_", "TF_"))}


class ReplayTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not TOOL or not os.access(TOOL, os.X_OK):
            raise RuntimeError(f"GPUMEM_TEST_REPLAY does not name the built gpumem-replay: {TOOL!r}")

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def trace(self, text: str, name: str = "trace.csv") -> str:
        path = os.path.join(self.tmp.name, name)
        with open(path, "w", encoding="ascii", newline="") as f:
            f.write(text)
        return path

    def run_tool(self, *args, env=None, input_text=None) -> subprocess.CompletedProcess:
        environment = clean_environment()
        environment.update(env or {})
        return subprocess.run([TOOL, *args], env=environment, capture_output=True, text=True, timeout=120,
                              input=input_text)

    def run_json(self, *args, env=None, input_text=None) -> dict:
        result = self.run_tool("--json", *args, env=env, input_text=input_text)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stderr, "")
        lines = result.stdout.splitlines()
        self.assertEqual(len(lines), 1, result.stdout)
        report = json.loads(lines[0])
        self.assertIsInstance(report, dict)
        return report

    def assert_usage_error(self, args, needle, env=None):
        result = self.run_tool(*args, env=env)
        with self.subTest(args=args):
            self.assertEqual(result.returncode, 2, result.stderr)
            self.assertEqual(result.stdout, "")
            lines = result.stderr.splitlines()
            self.assertEqual(len(lines), 1, result.stderr)
            self.assertTrue(lines[0].startswith("gpumem-replay: "), lines[0])
            self.assertIn(needle, lines[0])

    # --- reports -------------------------------------------------------------------------------

    def test_text_report(self):
        result = self.run_tool("--limit", "8MiB", "--preallocate", "--source", "classic", self.trace(SMALL_TRACE))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stderr, "")
        rows = {}
        for line in result.stdout.splitlines():
            label, _, value = line.partition("  ")
            rows[label.strip()] = value.strip()
        self.assertEqual(rows["peak in use"], "4096 (4.00 KiB)")
        self.assertEqual(rows["peak requested"], "4000 (3.91 KiB)")
        self.assertEqual(rows["peak reserved"], "8388608 (8.00 MiB)")
        self.assertEqual(rows["driver calls"], "1 (0 growth steps, 0 remappings, 0 unmappings, 0 loans, 0 releases)")
        self.assertEqual(rows["operations"], "4 (2 allocations, 2 frees)")
        self.assertEqual(rows["failed"], "0")
        self.assertEqual(rows["skipped failures"], "1")
        self.assertEqual(rows["unmatched frees"], "1")
        self.assertRegex(rows["utilisation"], r"^0\.0005 \(0\.05%\)$")
        self.assertRegex(rows["time per op"], r"^\d+\.\d ns$")
        self.assertIn("preallocate, classic source", rows["arena"])
        self.assertNotIn("min limit", rows)
        # The values line up in one column, after labels padded to 18 characters.
        for line in result.stdout.splitlines():
            self.assertTrue(len(line) > 18 and line[17] == " " and line[18] != " ", line)

    def test_json_report(self):
        report = self.run_json("--limit", "8MiB", "--preallocate", "--source", "classic", self.trace(SMALL_TRACE))
        self.assertTrue(REQUIRED_KEYS <= set(report), set(report))
        self.assertNotIn("min_limit", report)
        expected = {"peak_in_use": 4096, "peak_requested": 4000, "peak_reserved": 8 * MiB,
                    "driver_calls": 1, "driver_releases": 0, "operations": 4, "failed": 0,
                    "skipped_failures": 1, "unmatched_frees": 1, "device": 0, "limit": 8 * MiB,
                    "mode": "preallocate", "source": "classic"}
        for key, value in expected.items():
            self.assertEqual(report[key], value, key)
        self.assertAlmostEqual(report["utilisation"], 4000 / (8 * MiB))
        self.assertGreater(report["ns_per_op"], 0)

    def test_growth_mode(self):
        report = self.run_json("--limit", "1GiB", "--growth", "--source", "classic", self.trace(SMALL_TRACE))
        self.assertEqual(report["mode"], "growth")
        self.assertEqual(report["peak_reserved"], 8 * MiB)  # one region of the growth floor
        self.assertEqual(report["driver_calls"], 1)
        self.assertAlmostEqual(report["utilisation"], 4000 / (8 * MiB))
        report = self.run_json("--limit", "1GiB", "--growth", "--source", "classic", "--min-growth", "2MiB",
                               self.trace(SMALL_TRACE))
        self.assertEqual((report["peak_reserved"], report["min_growth"]), (2 * MiB, 2 * MiB))

    def test_vmm_source(self):
        # Growth over the vmm source: one region grown by the shortfall in 2 MiB granules, so the
        # freed blocks' space coalesces with the end: 4 MiB mapped where classic regions take 9.
        trace = "\n".join(["Thread,Time,Action,Pointer,Size,Stream",
                           "1,1,allocate,0xa00000,1048576,0",
                           "1,2,allocate,0xb00000,3145728,0",
                           "1,3,free,0xa00000,0,0",
                           "1,4,free,0xb00000,0,0",
                           "1,5,allocate,0xc00000,4194304,0"]) + "\n"
        path = self.trace(trace)
        common = ("--growth", "--limit", "64MiB", "--min-growth", "2MiB")
        vmm = self.run_json(*common, "--source", "vmm", path)
        self.assertEqual((vmm["source"], vmm["peak_reserved"], vmm["region_grows"]), ("vmm", 4 * MiB, 1))
        # The range reserved; each step's memory created, mapped and opened to the device.
        self.assertEqual(vmm["driver_calls"], 7)
        self.assertEqual({name: count for name, count in vmm["calls"].items() if count},
                         {"cuMemAddressReserve": 1, "cuMemCreate": 2, "cuMemMap": 2, "cuMemSetAccess": 2})
        classic = self.run_json(*common, "--source", "classic", path)
        self.assertEqual((classic["source"], classic["peak_reserved"], classic["driver_calls"]),
                         ("classic", 9 * MiB, 3))
        self.assertEqual(classic["calls"]["cuMemAlloc"], 3)
        self.assertEqual(vmm["peak_live_granules"], 4 * MiB)  # A and B on granules 0-1, then C on the same
        # The source follows GPUMEM_REGION_SOURCE as the shim does, unless --source says otherwise.
        self.assertEqual(self.run_json(*common, path, env={"GPUMEM_REGION_SOURCE": "vmm"})["source"], "vmm")
        self.assertEqual(self.run_json(*common, path, env={"GPUMEM_REGION_SOURCE": "auto"})["source"], "vmm")
        self.assertEqual(self.run_json(*common, path, env={"GPUMEM_REGION_SOURCE": "classic"})["source"], "classic")
        self.assertEqual(self.run_json(*common, path)["source"], "vmm")  # the default

    def test_modelled_driver_time(self):
        # Each call costs its published figure (microseconds), whatever its size; --latency replaces
        # the model, or one call's figure in it.
        published = {"cuMemAlloc": 50, "cuMemFree": 50, "cuMemAddressReserve": 19, "cuMemAddressFree": 19,
                     "cuMemCreate": 193.32, "cuMemMap": 1.45, "cuMemSetAccess": 35.99, "cuMemUnmap": 25.63,
                     "cuMemRelease": 25.63, "cuMemRetainAllocationHandle": 1.45}
        path = self.trace(SMALL_TRACE)
        for source in ("vmm", "classic"):
            with self.subTest(source=source):
                report = self.run_json("--growth", "--limit", "1GiB", "--source", source, path)
                self.assertEqual(report["latency"], "published")
                self.assertGreater(report["driver_calls"], 0)
                expected = sum(published[name] * count for name, count in report["calls"].items()) / 1000
                self.assertAlmostEqual(report["driver_ms"], expected, places=6)
                self.assertGreater(report["driver_ms"], 0)
                free = self.run_json("--growth", "--limit", "1GiB", "--source", source, "--latency", "none", path)
                self.assertEqual((free["driver_ms"], free["calls"]), (0, report["calls"]))
        report = self.run_json("--growth", "--limit", "1GiB", "--source", "vmm", "--latency",
                               "published,cuMemCreate=1000", path)
        creates = report["calls"]["cuMemCreate"]
        self.assertGreater(creates, 0)
        others = sum(published[name] * count for name, count in report["calls"].items() if name != "cuMemCreate")
        self.assertAlmostEqual(report["driver_ms"], (creates * 1000 + others) / 1000, places=6)
        text = self.run_tool("--growth", "--limit", "1GiB", "--source", "vmm", path).stdout
        self.assertRegex(text, r"(?m)^driver time +[0-9.]+ ms modelled \(latency published\)$")
        self.assertRegex(text, r"(?m)^calls by name +cuMemAddressReserve 1, cuMemCreate [0-9]+")

    def test_no_driver_calls_in_a_steady_state(self):
        # A training loop: the same step (weights kept, activations of mixed sizes allocated, then freed
        # in another order) over and over. Whatever the first steps make of the driver, later ones make
        # nothing more: 3 steps and 30 make the same calls, in growth mode, on either source.
        rng = random.Random(7)
        sizes = [rng.choice((256, 4096, 65536, 1 << 20, 3 << 20, 17 << 20)) + rng.randrange(512) for _ in range(60)]
        order = list(range(len(sizes)))
        rng.shuffle(order)

        def trace(steps):
            rows = ["Thread,Time,Action,Pointer,Size,Stream", f"1,0,allocate,{1 << 40:#x},{96 << 20},0"]
            clock = 1
            for step in range(steps):
                for index, size in enumerate(sizes):
                    rows.append(f"1,{clock},allocate,{(step * 1000 + index + 1) << 32:#x},{size},0")
                    clock += 1
                for index in order:
                    rows.append(f"1,{clock},free,{(step * 1000 + index + 1) << 32:#x},0,0")
                    clock += 1
            return self.trace("\n".join(rows) + "\n", f"steps{steps}.csv")

        short, long = trace(3), trace(30)
        for source in ("vmm", "classic"):
            with self.subTest(source=source):
                common = ("--growth", "--limit", "8GiB", "--source", source)
                first, many = self.run_json(*common, short), self.run_json(*common, long)
                self.assertEqual(many["failed"], 0)
                self.assertGreater(first["driver_calls"], 0)
                self.assertEqual(many["calls"], first["calls"])

    def test_split_rule_from_the_environment(self):
        # A 1.5 MiB request in a fresh 2 MiB region: tight splits off the 0.5 MiB rest, xla hands out
        # the whole region (the rest is less than the request).
        trace = "Thread,Time,Action,Pointer,Size,Stream\n1,1,allocate,0xa00000,1572864,0\n"
        path = self.trace(trace)
        tight = self.run_json("--growth", "--limit", "64MiB", "--min-growth", "2MiB", path)
        self.assertEqual((tight["split_rule"], tight["peak_in_use"]), ("tight", 3 * MiB // 2))
        xla = self.run_json("--growth", "--limit", "64MiB", "--min-growth", "2MiB", path,
                            env={"GPUMEM_SPLIT_RULE": "xla"})
        self.assertEqual((xla["split_rule"], xla["peak_in_use"]), ("xla", 2 * MiB))

    def test_min_limit(self):
        path = self.trace(FRAGMENTING_TRACE)
        report = self.run_json("--limit", "3MiB", "--preallocate", "--source", "classic", "--min-limit", path)
        self.assertEqual(report["failed"], 1)  # at 3 MiB the 2 MiB block does not fit
        self.assertEqual(report["min_limit"], 4 * MiB)
        self.assertEqual(report["peak_requested"], 3 * MiB)
        self.assertEqual(self.run_json("--limit", "4MiB", "--preallocate", "--source", "classic", path)["failed"], 0)

        result = self.run_tool("--limit", "64MiB", "--preallocate", "--source", "classic", "--min-limit", path)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertRegex(result.stdout, r"(?m)^min limit +4194304 \(4\.00 MiB\)$")

    def test_min_limit_none(self):
        trace = "Thread,Time,Action,Pointer,Size,Stream\n1,1,allocate,0x100,2199023255552,0\n"  # 2 TiB
        report = self.run_json("--limit", "1GiB", "--growth", "--min-limit", self.trace(trace))
        self.assertIsNone(report["min_limit"])
        self.assertEqual(report["failed"], 1)

    # --- the limit, the mode and the device -----------------------------------------------------

    def test_limit_from_the_trace_and_the_environment(self):
        path = self.trace(SMALL_TRACE)
        self.assertEqual(self.run_json(path)["limit"], 8 * MiB)  # the trace's Limit column
        self.assertEqual(self.run_json(path, env={"GPUMEM_LIMIT": "4MiB"})["limit"], 4 * MiB)
        report = self.run_json("--device-memory", "16GiB", path)
        self.assertEqual(report["limit"], 12 * GiB)  # 0.75 by default
        report = self.run_json("--device-memory", "16GiB", path, env={"XLA_PYTHON_CLIENT_MEM_FRACTION": ".5"})
        self.assertEqual(report["limit"], 8 * GiB)
        report = self.run_json("--device-memory", "1GiB", path, env={"GPUMEM_LIMIT": "10GiB"})
        self.assertEqual(report["limit"], GiB)  # capped at the device
        report = self.run_json("--limit", "512MB", "--device-memory", "16GiB", path,
                               env={"GPUMEM_LIMIT": "1GiB"})
        self.assertEqual(report["limit"], 512 * 1000 * 1000)
        self.assertEqual(self.run_json("--limit=1e9", path)["limit"], 10 ** 9)

    def test_mode_from_the_environment(self):
        path = self.trace(SMALL_TRACE)
        self.assertEqual(self.run_json(path)["mode"], "preallocate")
        for env in ({"GPUMEM_PREALLOCATE": "false"}, {"XLA_PYTHON_CLIENT_PREALLOCATE": "0"},
                    {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}):
            with self.subTest(env=env):
                report = self.run_json(path, env=env)
                self.assertEqual(report["mode"], "growth")
                self.assertEqual(report["peak_reserved"], 8 * MiB)
                self.assertEqual(self.run_json("--preallocate", path, env=env)["mode"], "preallocate")
        self.assertEqual(self.run_json("--growth", path)["mode"], "growth")

    def test_garbage_collection_from_the_environment(self):
        # Growth, 6 MiB: a free 2 MiB region must be given back for the 5 MiB block to fit.
        trace = "\n".join(["Thread,Time,Action,Pointer,Size,Stream",
                           "1,1,allocate,0x100000,1048576,0",
                           "1,2,free,0x100000,0,0",
                           "1,3,allocate,0x200000,5242880,0"]) + "\n"
        path = self.trace(trace)
        classic = ("--growth", "--source", "classic", "--limit", "6MiB", "--min-growth", "2MiB")
        report = self.run_json(*classic, path)
        # Two regions allocated, the first freed: three calls.
        self.assertEqual((report["failed"], report["driver_calls"], report["driver_releases"]), (0, 3, 1))
        report = self.run_json(*classic, path, env={"GPUMEM_GARBAGE_COLLECTION": "off"})
        self.assertEqual((report["failed"], report["driver_calls"], report["driver_releases"]), (1, 1, 0))

    def test_device_selection(self):
        path = self.trace(TWO_DEVICE_TRACE)
        report = self.run_json(path)  # the first row's device
        self.assertEqual((report["device"], report["limit"], report["peak_requested"]), (1, 16 * MiB, 4096))
        self.assertEqual(report["operations"], 2)
        report = self.run_json("--device", "0", path)
        self.assertEqual((report["device"], report["limit"], report["peak_requested"]), (0, 32 * MiB, 16384))
        self.assertEqual(report["operations"], 2)

    def test_rmm_trace_on_standard_input(self):
        report = self.run_json("--limit", "16MiB", "-", input_text=FRAGMENTING_TRACE)
        self.assertEqual(report["device"], 0)
        self.assertEqual(report["operations"], 6)
        self.assertEqual(report["peak_requested"], 3 * MiB)

    # --- errors ---------------------------------------------------------------------------------

    def test_vmm_unmaps_idle_granules(self):
        # A and C of 2 MiB around B of 6; B freed leaves a mapped hole; D (8 MiB) fits nowhere. With no
        # slack, the arena holds at most its live peak (12 MiB: A, C, D) and one 2 MiB growth step:
        # before growing the hole is unmapped (one call) and its memory maps again under D, which
        # needs 2 MiB more: 12 MiB at the peak, not 18. --keep-idle keeps the hole mapped. Then E
        # (2 MiB) goes into the hole, mapped again from new memory.
        trace = "\n".join(["Thread,Time,Action,Pointer,Size,Stream",
                           "1,1,allocate,0xa00000,2097152,0",
                           "1,2,allocate,0xb00000,6291456,0",
                           "1,3,allocate,0xc00000,2097152,0",
                           "1,4,free,0xb00000,0,0",
                           "1,5,allocate,0xd00000,8388608,0",
                           "1,6,allocate,0xe00000,2097152,0"]) + "\n"
        path = self.trace(trace)
        common = ("--growth", "--limit", "64MiB", "--min-growth", "2MiB", "--source", "vmm", "--idle-slack", "0")
        default = self.run_json(*common, path)
        self.assertEqual((default["peak_reserved"], default["region_unmaps"], default["granule"]),
                         (14 * MiB, 1, 2 * MiB))
        # Pieces created: A's (the first region), B's, C's, D's remaining 2 MiB and E's.
        self.assertEqual(default["calls"]["cuMemCreate"], 5)
        self.assertEqual(default["calls"]["cuMemUnmap"], 1)
        kept = self.run_json(*common, "--keep-idle", path)
        self.assertEqual((kept["peak_reserved"], kept["region_unmaps"], kept["region_maps"]), (18 * MiB, 0, 0))
        # Without E the difference shows at the peak.
        short = self.trace("\n".join(trace.splitlines()[:-1]) + "\n", "short.csv")
        self.assertEqual(self.run_json(*common, short)["peak_reserved"], 12 * MiB)
        self.assertEqual(self.run_json(*common, "--keep-idle", short)["peak_reserved"], 18 * MiB)
        # The default slack (1/64 of the live peak and one growth step) is too little for a 6 MiB hole
        # to stay mapped: the same as no slack.
        self.assertEqual(self.run_json(*common[:-2], short)["peak_reserved"], 12 * MiB)
        # A coarser granule: B's hole of 6 MiB holds one whole 4 MiB granule, unmapped.
        coarse = self.run_json(*common, "--granule", "4MiB", short)
        self.assertEqual(coarse["region_unmaps"], 1)

    def test_vmm_lends_idle_granules_of_busy_pieces(self):
        # 512 MiB preallocated in pieces of 2, 2, 4 and 8 MiB, then 16 MiB each: 64 blocks of 8 MiB
        # fill it; every other one from the fourth on freed leaves 8 MiB idle beside a live block in
        # each 16 MiB piece, and no memory under the limit. A 48 MiB block then lies over the last
        # freed block (8 MiB of the last piece) and 40 MiB grown past the preallocation, backed by 20
        # idle granules mapped a second time: served, within the limit.
        rows = ["Thread,Time,Action,Pointer,Size,Stream"]
        rows += [f"1,{i},allocate,{(i + 1) << 32:#x},{8 * MiB},0" for i in range(64)]
        rows += [f"1,{64 + i},free,{(i + 1) << 32:#x},0,0" for i in range(3, 64, 2)]
        rows += [f"1,200,allocate,{100 << 32:#x},{48 * MiB},0"]
        path = self.trace("\n".join(rows) + "\n", "lend.csv")
        report = self.run_json("--preallocate", "--limit", "512MiB", "--source", "vmm", path)
        self.assertEqual((report["failed"], report["region_loans"], report["peak_reserved"]), (0, 20, 512 * MiB))
        # The range reserved; 35 pieces for the preallocation (2, 2, 4, 8 MiB and 31 of 16 MiB), each
        # created and mapped, opened to the device at once; a mapping and its opening per loan.
        self.assertEqual(report["driver_calls"], 1 + 35 + 35 + 1 + 2 * 20)
        # Classic regions cannot: the block is refused.
        self.assertEqual(self.run_json("--preallocate", "--limit", "512MiB", "--source", "classic", path)["failed"], 1)

    def test_bad_arguments(self):
        path = self.trace(SMALL_TRACE)
        no_limit = self.trace("Thread,Time,Action,Pointer,Size,Stream\n1,1,allocate,0x1,1,0\n", "rmm.csv")
        cases = [
            (["--limit", "lots", path], '--limit: expected a byte size above 0 (e.g. 10GiB, 512MB, 1e9, 1.5G), '
                                        'got "lots"'),
            (["--limit", "0", path], "--limit: expected a byte size above 0"),
            (["--limit", "100", path], '--limit: expected a limit of at least 256 bytes, got "100"'),
            ([path, "--limit"], "--limit: expected a byte size above 0 (e.g. 10GiB, 512MB, 1e9, 1.5G), got nothing"),
            (["--device-memory", "-1G", path], '--device-memory: expected a byte size above 0'),
            (["--device", "first", path], '--device: expected a device ordinal (0, 1, ...), got "first"'),
            (["--device", "-1", path], "--device: expected a device ordinal"),
            (["--device", "3", path], "--device 3: expected a device the trace has rows for (0)"),
            (["--source=mmap", path], '--source: expected vmm or classic, got "mmap"'),
            (["--min-growth", "big", path], '--min-growth: expected a byte size above 0'),
            (["--granule", "3MiB", path], '--granule: expected a power of two of at least 2MiB, got "3MiB"'),
            (["--granule", "1MiB", path], '--granule: expected a power of two of at least 2MiB'),
            (["--keep-idle=no", path], '--keep-idle takes no value, got "no"'),
            (["--idle-slack", "-1", path], '--idle-slack: expected a fraction of 0 or more (0.015625), or inf, got "-1"'),
            (["--idle-slack", "lots", path], "--idle-slack: expected a fraction of 0 or more"),
            (["--latency", "fast", path], '--latency: expected published, none or NAME=MICROSECONDS'),
            (["--latency", "cuMemCreate=-3", path], 'got "cuMemCreate=-3"'),
            ([path, "--latency"], "--latency: expected published, none or NAME=MICROSECONDS items"),
            (["--growth", "--preallocate", path], "--preallocate: expected either --preallocate or --growth"),
            (["--json=yes", path], '--json takes no value, got "yes"'),
            (["--fast", path], 'unknown option "--fast"'),
            ([], "expected a trace file"),
            ([path, path], "unexpected argument"),
            ([no_limit], "expected --limit SIZE or --device-memory SIZE"),
        ]
        for args, needle in cases:
            self.assert_usage_error(args, needle)
        self.assert_usage_error([path], 'GPUMEM_PREALLOCATE="maybe" is not', env={"GPUMEM_PREALLOCATE": "maybe"})
        self.assert_usage_error([path], 'GPUMEM_SPLIT_RULE="loose" is not one of tight, xla',
                                env={"GPUMEM_SPLIT_RULE": "loose"})
        self.assert_usage_error([path], 'XLA_PYTHON_CLIENT_MEM_FRACTION="1.5" is not a fraction in (0, 1]',
                                env={"XLA_PYTHON_CLIENT_MEM_FRACTION": "1.5"})

    def test_malformed_trace(self):
        bad = SMALL_TRACE.replace("7,1764047045.000003,free,0x7f0000000000,1000,",
                                  "7,1764047045.000003,free,0x7f0000000000,1k,")
        cases = [
            (bad, "line 4: column Size: expected a decimal byte count, got \"1k\""),
            ("Thread,Time,Action,Pointer,Size\n", "line 1: the header lacks column Stream"),
            ("Thread,Time,Action,Pointer,Size,Stream\n\n1,noon,allocate,0x1,1,0\n", "line 3: column Time:"),
            ("Thread,Time,Action,Pointer,Size,Stream\n1,1,allocate,0x1,1\n", "line 2: column Stream: missing"),
            ("", "line 1: expected a header line"),
        ]
        for text, needle in cases:
            path = self.trace(text, "bad.csv")
            result = self.run_tool("--limit", "1GiB", path)
            with self.subTest(needle=needle):
                self.assertEqual(result.returncode, 1, result.stderr)
                self.assertEqual(result.stdout, "")
                lines = result.stderr.splitlines()
                self.assertEqual(len(lines), 1, result.stderr)
                self.assertTrue(lines[0].startswith(f"gpumem-replay: {path}: "), lines[0])
                self.assertIn(needle, lines[0])

    def test_unreadable_trace(self):
        missing = os.path.join(self.tmp.name, "missing.csv")
        result = self.run_tool("--limit", "1GiB", missing)
        self.assertEqual(result.returncode, 1)
        self.assertEqual(result.stderr.splitlines(),
                         [f'gpumem-replay: cannot read "{missing}": No such file or directory'])
        result = self.run_tool("--limit", "1GiB", self.tmp.name)  # a directory
        self.assertEqual(result.returncode, 1)
        self.assertEqual(result.stderr.splitlines(), [f'gpumem-replay: cannot read "{self.tmp.name}": Is a directory'])

    def test_help(self):
        result = self.run_tool("--help")
        self.assertEqual(result.returncode, 0)
        self.assertEqual(result.stderr, "")
        for word in ("--device", "--preallocate", "--growth", "--limit", "--device-memory", "--source",
                     "--min-limit", "--json", "Thread", "Time", "Action", "Pointer", "Size", "Stream",
                     "Device", "Reserved", "Limit", "allocate failure", "GPUMEM_PREALLOCATE",
                     "XLA_PYTHON_CLIENT_PREALLOCATE", "TF_FORCE_GPU_ALLOW_GROWTH", "GPUMEM_GARBAGE_COLLECTION",
                     "GPUMEM_LIMIT", "GPUMEM_SPLIT_RULE", "GPUMEM_REGION_SOURCE", "--min-growth", "unmatched",
                     "Exit status"):
            self.assertIn(word, result.stdout)
        self.assertEqual(self.run_tool("-h").stdout, result.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
