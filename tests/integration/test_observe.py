"""Observability: the exit statistics (GPUMEM_STATS, GPUMEM_STATS_FILE), the allocation trace
(GPUMEM_TRACE) and its replay, the rate-limited out-of-memory report, and the C API through dlsym."""

import csv
import glob
import json
import os
import random
import re
import signal
import stat
import subprocess
import tempfile
import threading
import time
import unittest

import gpumem_testlib as t

MIB = 1 << 20
PROGRAM = "observe_scenarios"
TABLE_TITLE = "memory statistics at exit"


def program():
    return t.program_path(PROGRAM)


def replay_tool():
    return os.environ.get("GPUMEM_TEST_REPLAY") or os.path.join(t.build_root(), "tools", "gpumem-replay")


def plot_tool():
    return os.path.join(os.environ["GPUMEM_TEST_SOURCE_ROOT"], "scripts", "gpumem-plot")


def read_trace(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def values(result):
    return t.key_values(result.stdout)


class ObserveTestCase(t.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="gpumem-observe-")
        self.addCleanup(self.tmp.cleanup)

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def run_program(self, *args, env=None, preload=True, timeout=120):
        return t.run([program(), *args], env=env, preload=preload, timeout=timeout)

    def stats_files(self):
        return sorted(glob.glob(self.path("stats-*.json")))

    def load_single_stats(self, result):
        files = self.stats_files()
        self.assertEqual(len(files), 1, f"{files}\n{result.describe()}")
        with open(files[0]) as f:
            return json.load(f)


class ExitStatistics(ObserveTestCase):
    def test_the_table_comes_after_the_programs_output_through_a_pipe(self):
        # stdout and stderr into one pipe (2>&1 | less): the program's output, block-buffered there and
        # written out by libc after the library's exit function, must not come after the table.
        env = t.clean_environment()
        env.update({"LD_LIBRARY_PATH": t.sim_dir(), "LD_PRELOAD": t.shim_path(), "GPUMEM_STATS": "1",
                    "GPUMEM_LOG_LEVEL": "warn"})
        merged = subprocess.run([program(), "churn", "300"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, timeout=120)
        self.assertEqual(merged.returncode, 0, merged.stdout)
        lines = merged.stdout.splitlines()
        table = next(i for i, line in enumerate(lines) if TABLE_TITLE in line)
        last_own = max(i for i, line in enumerate(lines) if line.startswith(("allocs=", "frees=", "live=")))
        self.assertLess(last_own, table, merged.stdout)


    def churn_with_stats(self, mode_env, operations=1500, extra=()):
        env = {"GPUMEM_STATS": "1", "GPUMEM_STATS_FILE": self.path("stats-%p.json"), "GPUMEM_LIMIT": "2GiB"}
        env.update(mode_env)
        result = self.run_program("churn", operations, *extra, env=env)
        self.assertSucceeded(result)
        return result, self.load_single_stats(result)

    def test_bfc_growth_figures_match_the_simulator(self):
        started = time.monotonic()
        result, stats = self.churn_with_stats({"GPUMEM_PREALLOCATE": "0"})
        run_ns = (time.monotonic() - started) * 1e9
        self.assertEqual(result.stderr.count(TABLE_TITLE), 1, result.describe())
        out = values(result)
        (device,) = stats["devices"]
        sim = result.device(0)
        self.assertEqual(stats["pid"] > 0, True)
        self.assertEqual(device["mode"], "bfc")
        self.assertEqual(device["limit"], 2 << 30)
        self.assertEqual(device["allocations"], int(out["allocs"]))
        self.assertEqual(device["frees"], int(out["frees"]))
        self.assertEqual(device["refusals"], 0)
        # Every region (or piece of virtual memory) is one driver allocation, and nothing else reached
        # the driver.
        self.assertEqual(device["driver_allocations"], sim["driver_allocs"] + sim["vmm"]["creates"], result.describe())
        self.assertEqual(device["peak_reserved"], sim["peak_bytes_reserved"])
        self.assertEqual(device["driver_allocations_avoided"],
                         device["allocations"] - device["driver_allocations"])
        self.assertLessEqual(device["fence_syncs"], sim["context_syncs"])
        self.assertEqual(device["paths"]["arena"]["allocations"], device["allocations"])
        # Time inside the calls served: some, and no more than the run took (timed because statistics
        # were asked for).
        self.assertGreater(device["call_ns"], 0)
        self.assertLess(device["call_ns"], run_ns, result.describe())
        self.assertRegex(result.stderr, r"time in allocation calls\s+\d+\.\d{3} ms\n")
        self.assertGreaterEqual(device["peak_reserved"], device["peak_in_use"])
        self.assertGreater(device["peak_in_use"], 0)
        self.assertGreaterEqual(device["fragmentation"], 0.0)
        self.assertLessEqual(device["fragmentation"], 1.0)
        # The table on stderr shows the same figures.
        self.assertRegex(result.stderr, rf"allocations served\s+{device['allocations']}\n")
        self.assertRegex(result.stderr, rf"reserved at peak\s+{device['peak_reserved']} ")

    def test_classic_preallocation_is_two_driver_allocations(self):
        # The head (1/32 of the limit) and the rest.
        result, stats = self.churn_with_stats({"GPUMEM_REGION_SOURCE": "classic"})
        (device,) = stats["devices"]
        self.assertEqual(device["driver_allocations"], 2)
        self.assertEqual(result.device(0)["driver_allocs"], 2)
        self.assertEqual(device["peak_reserved"], 2 << 30)
        self.assertEqual(device["regions"], 2)

    def test_default_preallocation_is_a_few_pieces_of_virtual_memory(self):
        # One region mapped in pieces (allocators/piece_layout.h), 2 MiB doubling up to 1/32 of the
        # limit: 2 GiB in 37.
        result, stats = self.churn_with_stats({})
        (device,) = stats["devices"]
        self.assertEqual(device["driver_allocations"], 37, result.describe())
        self.assertEqual(result.device(0)["vmm"]["creates"], 37)
        self.assertEqual(result.device(0)["driver_allocs"], 0)
        self.assertEqual(device["peak_reserved"], 2 << 30)
        self.assertEqual(device["regions"], 1)

    def test_platform_mode_counts_every_driver_allocation(self):
        result, stats = self.churn_with_stats({"GPUMEM_MODE": "platform"})
        (device,) = stats["devices"]
        sim = result.device(0)
        # Synchronous requests are cuMemAlloc calls, stream-ordered ones the driver's pool.
        self.assertEqual(device["driver_allocations"], sim["driver_allocs"] + sim["pool"]["async_allocs"])
        self.assertEqual(device["paths"]["driver"]["allocations"], device["allocations"])
        self.assertEqual(device["driver_allocations_avoided"], 0)

    def test_cuda_async_mode_counts_the_pool_path(self):
        result, stats = self.churn_with_stats({"GPUMEM_MODE": "cuda_async"})
        (device,) = stats["devices"]
        self.assertEqual(device["mode"], "cuda_async")
        self.assertEqual(device["paths"]["async_pool"]["allocations"], device["allocations"])
        self.assertEqual(result.device(0)["pool"]["async_allocs"], device["allocations"])
        # In use: the live blocks' bytes (the budget's charge); at their peak no more than the pool
        # itself had in use at its peak, and more than nothing.
        self.assertGreater(device["peak_in_use"], 0)
        self.assertLessEqual(device["peak_in_use"], result.device(0)["pool"]["peak_bytes_used"])
        self.assertEqual(device["peak_in_use"], device["budget"]["paths"]["async_pool"]["peak_charged"])
        self.assertEqual(device["in_use"], device["budget"]["paths"]["async_pool"]["charged"])
        # Reserved: the pool's own figures as the driver gave them (its high mark), not zeros.
        self.assertGreaterEqual(device["peak_reserved"], device["peak_in_use"], result.describe())
        self.assertLessEqual(device["peak_reserved"], result.device(0)["pool"]["peak_bytes_reserved"])

    def test_in_use_never_reads_above_reserved(self):
        # Small blocks from a pool that grows in 2 MiB steps: a block was charged a whole step for a
        # moment, which the peak in use must not count (it read 2 MiB + 7,200 of 2 MiB reserved).
        for mode_env in ({"GPUMEM_MODE": "cuda_async"}, {"GPUMEM_MODE": "platform"}, {}):
            with self.subTest(mode=mode_env.get("GPUMEM_MODE", "bfc")):
                for old in self.stats_files():
                    os.remove(old)
                env = {"GPUMEM_STATS_FILE": self.path("stats-%p.json"), "GPUMEM_LIMIT": "1GiB", **mode_env}
                result = self.run_program("hold", 60, 7200, env=env)
                self.assertSucceeded(result)
                (device,) = self.load_single_stats(result)["devices"]
                self.assertGreaterEqual(device["peak_in_use"], 60 * 7200, result.describe())
                self.assertLessEqual(device["peak_in_use"], device["peak_reserved"], result.describe())

    def test_written_once_at_every_kind_of_exit(self):
        for scenario in (("exit_thread",), ("return_streams",), ("churn", "300")):
            with self.subTest(scenario=scenario):
                for old in self.stats_files():
                    os.remove(old)
                env = {"GPUMEM_STATS": "1", "GPUMEM_STATS_FILE": self.path("stats-%p.json")}
                result = self.run_program(*scenario, env=env)
                self.assertSucceeded(result)
                self.assertEqual(result.stderr.count(TABLE_TITLE), 1, result.describe())
                stats = self.load_single_stats(result)
                self.assertGreater(stats["devices"][0]["allocations"], 0)

    def test_forked_child_keeps_its_parents_file(self):
        env = {"GPUMEM_STATS": "1", "GPUMEM_STATS_FILE": self.path("stats-%p.json")}
        result = self.run_program("fork", env=env)
        self.assertSucceeded(result)
        self.assertEqual(values(result)["child_status"], "0")
        # The child never used CUDA: it writes nothing; the parent writes once.
        self.assertEqual(result.stderr.count(TABLE_TITLE), 1, result.describe())
        stats = self.load_single_stats(result)
        self.assertNotEqual(stats["pid"], int(values(result)["child"]))

        fixed = self.path("stats-fixed.json")
        result = self.run_program("fork", env={"GPUMEM_STATS_FILE": fixed})
        self.assertSucceeded(result)
        with open(fixed) as f:
            self.assertEqual(json.load(f)["devices"][0]["allocations"], 1)

    def test_nothing_written_without_cuda_or_when_inert(self):
        env = {"GPUMEM_STATS": "1", "GPUMEM_STATS_FILE": self.path("stats-%p.json")}
        result = t.run(["/bin/true"], env=env)
        self.assertSucceeded(result)
        self.assertNotIn(TABLE_TITLE, result.stderr)
        self.assertEqual(self.stats_files(), [])
        result = self.run_program("churn", "50", env=dict(env, GPUMEM_MODE="off"))
        self.assertSucceeded(result)
        self.assertNotIn(TABLE_TITLE, result.stderr)
        self.assertEqual(self.stats_files(), [])

    def test_bad_stats_values_and_paths(self):
        result = self.run_program("churn", "50", env={"GPUMEM_STATS": "loud"})
        self.assertSucceeded(result)
        self.assertIn('GPUMEM_STATS="loud" is not a boolean', result.stderr)
        os.mkdir(self.path("a-directory"))
        result = self.run_program("churn", "50", env={"GPUMEM_STATS_FILE": self.path("a-directory")})
        self.assertSucceeded(result)
        self.assertIn("GPUMEM_STATS_FILE", result.stderr)
        self.assertIn("not a regular file", result.stderr)


class Trace(ObserveTestCase):
    def test_rows_are_rmm_replay_log_format(self):
        trace = self.path("trace.csv")
        result = self.run_program("churn", "1200", env={"GPUMEM_TRACE": trace, "GPUMEM_LIMIT": "1GiB"})
        self.assertSucceeded(result)
        with open(trace) as f:
            header = f.readline().strip()
        self.assertEqual(header, "Thread,Time,Action,Pointer,Size,Stream,Device,Reserved,Limit,Mode")
        rows = read_trace(trace)
        # The policy's mode on the device's first row, for readers that label a timeline.
        self.assertEqual([row["Mode"] for row in rows[:2]], ["bfc preallocated", ""])
        self.assertEqual({row["Mode"] for row in rows[1:]}, {""})
        out = values(result)
        allocations = [r for r in rows if r["Action"] == "allocate"]
        frees = [r for r in rows if r["Action"] == "free"]
        self.assertEqual(len(allocations), int(out["allocs"]))
        self.assertEqual(len(frees), int(out["frees"]))
        self.assertEqual(len(rows), len(allocations) + len(frees))
        sizes = {}
        times = []
        for row in rows:
            self.assertTrue(row["Pointer"].startswith("0x"), row)
            self.assertEqual(row["Device"], "0")
            self.assertEqual(int(row["Limit"]), 1 << 30)
            self.assertGreaterEqual(int(row["Reserved"]), 1 << 30)  # preallocated
            times.append(float(row["Time"]))
            if row["Action"] == "allocate":
                self.assertNotIn(row["Pointer"], sizes, "an address handed out twice")
                sizes[row["Pointer"]] = row["Size"]
            else:
                self.assertEqual(sizes.pop(row["Pointer"]), row["Size"], "a free carries its block's size")
        self.assertEqual(times, sorted(times))
        self.assertEqual(len(sizes), int(out["live"]))
        self.assertEqual({r["Stream"] != "0" for r in allocations}, {True, False})

    def test_replay_reaches_the_same_peaks(self):
        tool = replay_tool()
        if not os.access(tool, os.X_OK):
            self.fail(f"gpumem-replay not built at {tool}")
        # Frees reused at once (none), so the arena sees the very sequence the trace holds.
        cases = [("preallocate", {"GPUMEM_FREE_SYNC": "none"}, ["--preallocate"]),
                 ("growth", {"GPUMEM_PREALLOCATE": "0", "GPUMEM_FREE_SYNC": "none"}, ["--growth"])]
        for name, env, replay_args in cases:
            with self.subTest(mode=name):
                trace = self.path(f"trace-{name}.csv")
                stats_file = self.path(f"stats-{name}.json")
                full_env = {"GPUMEM_TRACE": trace, "GPUMEM_STATS_FILE": stats_file, "GPUMEM_LIMIT": "1GiB"}
                full_env.update(env)
                result = self.run_program("churn", "3000", "sync", env=full_env)
                self.assertSucceeded(result)
                with open(stats_file) as f:
                    shim = json.load(f)["devices"][0]
                replay = subprocess.run([tool, trace, "--json", "--limit", "1GiB", *replay_args],
                                        capture_output=True, text=True, timeout=120,
                                        env=t.clean_environment())
                self.assertEqual(replay.returncode, 0, replay.stderr)
                replayed = json.loads(replay.stdout)
                self.assertEqual(replayed["peak_in_use"], shim["peak_in_use"])
                self.assertEqual(replayed["peak_reserved"], shim["peak_reserved"])
                self.assertEqual(replayed["calls"]["cuMemCreate"], shim["driver_allocations"])
                # The picture of the same trace shows the same peaks.
                plot = subprocess.run([plot_tool(), trace, "--text"], capture_output=True, text=True, timeout=120)
                self.assertEqual(plot.returncode, 0, plot.stderr)
                summary = re.search(r"peak in use (\d+) bytes at [0-9.]+ s, peak reserved (\d+) bytes", plot.stdout)
                self.assertIsNotNone(summary, plot.stdout)
                self.assertEqual(int(summary.group(1)), replayed["peak_requested"])
                self.assertEqual(int(summary.group(2)), shim["peak_reserved"])

    def test_refusals_are_traced_and_reported_once_per_size(self):
        trace = self.path("trace.csv")
        result = self.run_program("refuse", "40", str(512 * MIB),
                                  env={"GPUMEM_TRACE": trace, "GPUMEM_LIMIT": "256MiB"})
        self.assertSucceeded(result)
        self.assertEqual(values(result)["refused"], "40")
        refusals = [r for r in read_trace(trace) if r["Action"] == "allocate failure"]
        self.assertEqual(len(refusals), 40)
        self.assertEqual({r["Size"] for r in refusals}, {str(512 * MIB)})
        self.assertEqual({r["Pointer"] for r in refusals}, {"0x0"})
        # One report for 40 refusals within a second, naming the variable to raise.
        self.assertEqual(result.stderr.count("out of memory: bfc mode refused"), 1, result.stderr)
        self.assertIn("set by GPUMEM_LIMIT; raise it", result.stderr)
        self.assertIn("in use by chunk size", result.stderr)

        result = self.run_program("refuse", "5", str(512 * MIB),
                                  env={"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.01"})
        self.assertSucceeded(result)
        self.assertIn("raise XLA_PYTHON_CLIENT_MEM_FRACTION or set GPUMEM_LIMIT", result.stderr)

    def test_a_thousand_refusals_log_a_few_lines_in_every_mode(self):
        for env in ({}, {"GPUMEM_PREALLOCATE": "0"}, {"GPUMEM_MODE": "platform"}, {"GPUMEM_MODE": "cuda_async"}):
            with self.subTest(env=env):
                result = self.run_program("refuse", "1000", str(512 * MIB), env=dict(env, GPUMEM_LIMIT="256MiB"))
                self.assertSucceeded(result)
                self.assertEqual(values(result)["refused"], "1000")
                # Each report is a few lines; 1000 refusals within a second make one of each kind.
                self.assertLess(len(result.stderr.splitlines()), 20, result.stderr[:4000])
                self.assertIn("out of memory", result.stderr)

    def test_flushed_when_a_fatal_signal_arrives(self):
        for how, signal_number in (("abort", signal.SIGABRT), ("segv", signal.SIGSEGV),
                                   ("term", signal.SIGTERM)):
            with self.subTest(signal=how):
                trace = self.path(f"trace-{how}.csv")
                result = self.run_program("fatal", how, env={"GPUMEM_TRACE": trace})
                self.assertEqual(result.returncode, -signal_number, result.describe())
                rows = read_trace(trace)
                self.assertEqual(sum(r["Action"] == "allocate" for r in rows), 10)
                self.assertEqual(sum(r["Action"] == "free" for r in rows), 5)

    def test_signals_during_trace_writes_lose_no_row(self):
        # SIGALRM every 50 us without SA_RESTART while 20,000 operations are traced (the buffer of
        # 8,192 rows is written out twice during the run and once at exit): every row is there, whole.
        trace = self.path("trace.csv")
        result = self.run_program("churn_signals", "20000", env={"GPUMEM_TRACE": trace})
        self.assertSucceeded(result)
        got = values(result)
        self.assertGreater(int(got["signals"]), 100, result.describe())
        rows = read_trace(trace)
        self.assertEqual(len(rows), int(got["allocs"]) + int(got["frees"]))
        self.assertEqual(sum(r["Action"] == "allocate" for r in rows), int(got["allocs"]))
        self.assertTrue(all(r["Size"].isdigit() and r["Pointer"].startswith("0x") for r in rows))

    def test_flushed_at_exit_from_another_thread(self):
        trace = self.path("trace.csv")
        result = self.run_program("exit_thread", env={"GPUMEM_TRACE": trace})
        self.assertSucceeded(result)
        rows = read_trace(trace)
        self.assertGreaterEqual(sum(r["Action"] == "allocate" for r in rows), 200)

    def test_percent_p_names_a_file_per_process(self):
        result = self.run_program("churn", "100", env={"GPUMEM_TRACE": self.path("trace-%p.csv")})
        self.assertSucceeded(result)
        files = glob.glob(self.path("trace-*.csv"))
        self.assertEqual(len(files), 1)
        self.assertRegex(os.path.basename(files[0]), r"^trace-\d+\.csv$")

    def test_hostile_paths_are_refused_without_blocking(self):
        target = self.path("precious.txt")
        with open(target, "w") as f:
            f.write("keep me\n")
        link = self.path("link.csv")
        os.symlink(target, link)
        fifo = self.path("fifo.csv")
        os.mkfifo(fifo)
        os.mkdir(self.path("dir.csv"))
        cases = {link: "symbolic link", fifo: "not a regular file", self.path("dir.csv"): "not a regular file",
                 self.path("missing/dir/trace.csv"): "No such file"}
        for path, reason in cases.items():
            with self.subTest(path=path):
                result = self.run_program("churn", "100", env={"GPUMEM_TRACE": path}, timeout=30)
                self.assertSucceeded(result)
                self.assertIn("GPUMEM_TRACE", result.stderr)
                self.assertIn(reason, result.stderr)
                self.assertEqual(result.stderr.count("GPUMEM_TRACE"), 1, result.stderr)
        with open(target) as f:
            self.assertEqual(f.read(), "keep me\n")
        self.assertTrue(stat.S_ISFIFO(os.stat(fifo).st_mode))


class OutputFailures(ObserveTestCase):
    """The trace and the statistics file on a full disk, at the file-size limit (ulimit -f, whose
    SIGXFSZ ends a process by default), cut short by SIGKILL, or sent to a device: the program lives,
    a failure is said once on stderr, and what the file holds stays readable."""

    def assertEndsAtAWholeRow(self, path):
        with open(path, "rb") as f:
            text = f.read()
        self.assertTrue(text.endswith(b"\n"), text[-200:])
        replayed = t.run([replay_tool(), path], preload=False, sim=False)
        self.assertEqual(replayed.returncode, 0, replayed.describe())
        self.assertNotIn("cut short", replayed.stderr, replayed.describe())
        return text

    def assertSaidOnce(self, result, what, reason):
        lines = [line for line in result.stderr.splitlines() if what in line]
        self.assertEqual(len(lines), 1, result.describe())
        self.assertIn(reason, lines[0], result.describe())

    def test_a_trace_at_the_file_size_limit_stops_at_a_whole_row(self):
        trace = self.path("trace.csv")
        limit = 20000  # a few hundred rows of the tens of thousands churn writes
        result = t.run([program(), "churn", "20000"], env={"GPUMEM_TRACE": trace, "CUDASIM_REPORT": "/dev/null"},
                       fsize_limit=limit)
        self.assertSucceeded(result)  # not ended by SIGXFSZ
        self.assertSaidOnce(result, "GPUMEM_TRACE: cannot write to", "File too large")
        text = self.assertEndsAtAWholeRow(trace)
        self.assertLessEqual(len(text), limit)
        self.assertGreater(len(text), limit - 256)  # every whole row that fitted is there

    def test_a_trace_on_a_full_disk_stops_at_a_whole_row(self):
        # A 64 KiB tmpfs, mounted in a mount namespace of the run's own; the trace is copied out before
        # the namespace goes.
        folder = self.path("small")
        os.mkdir(folder)
        copy = self.path("trace.csv")
        script = ('mount -t tmpfs -o size=64k gpumem-test "$1" || exit 90; shift; "$@"; status=$?; '
                  f'cp "{folder}/trace.csv" "{copy}"; exit $status')
        probe = subprocess.run(["unshare", "-m", "sh", "-c", 'mount -t tmpfs -o size=64k gpumem-test "$1"', "sh",
                                folder], capture_output=True)
        if probe.returncode != 0:
            self.skipTest(f"no tmpfs can be mounted here (unshare -m, mount): {probe.stderr.decode().strip()}")
        result = t.run(["unshare", "-m", "sh", "-c", script, "sh", folder, program(), "churn", "20000"],
                       env={"GPUMEM_TRACE": os.path.join(folder, "trace.csv")})
        self.assertSucceeded(result)
        self.assertSaidOnce(result, "GPUMEM_TRACE: cannot write to", "No space left on device")
        text = self.assertEndsAtAWholeRow(copy)
        self.assertGreater(len(text), 32 * 1024)

    def test_a_trace_or_statistics_sent_to_a_device(self):
        # /dev/full: opened (a character device), its first write fails: said once. /dev/null: silent.
        for variable, what in (("GPUMEM_TRACE", "GPUMEM_TRACE: cannot write to"),
                               ("GPUMEM_STATS_FILE", "GPUMEM_STATS_FILE: cannot write to")):
            with self.subTest(variable=variable):
                result = self.run_program("churn", "200", env={variable: "/dev/full"})
                self.assertSucceeded(result)
                self.assertSaidOnce(result, what, "No space left on device")
                result = self.run_program("churn", "200", env={variable: "/dev/null"})
                self.assertSucceeded(result)
                self.assertNotIn("gpumem:", t.without_start_line(result.stderr), result.describe())
        # The statistics on the program's own stdout, beside what it printed.
        result = self.run_program("churn", "200", env={"GPUMEM_STATS_FILE": "/dev/stdout"})
        self.assertSucceeded(result)
        document = re.search(r"^\{$.*?^\}$", result.stdout, re.S | re.M)
        self.assertIsNotNone(document, result.describe())
        self.assertGreater(json.loads(document.group(0))["pid"], 0, result.describe())
        self.assertIn("allocs", values(result))

    def test_statistics_at_the_file_size_limit_leave_an_empty_file(self):
        stats = self.path("stats.json")
        result = t.run([program(), "churn", "200"], env={"GPUMEM_STATS_FILE": stats, "CUDASIM_REPORT": "/dev/null"},
                       fsize_limit=64)
        self.assertSucceeded(result)
        self.assertSaidOnce(result, "GPUMEM_STATS_FILE: cannot write to", "File too large")
        self.assertEqual(os.path.getsize(stats), 0)  # no half document

    def test_a_trace_killed_mid_write_replays(self):
        # SIGKILL at random moments of a long traced run: the trace's last row may be cut short; the
        # replay skips it (one note) and reads the rest.
        cut_short = 0
        for attempt in range(6):
            trace = self.path(f"trace-{attempt}.csv")
            env = t.clean_environment()
            env.update(LD_LIBRARY_PATH=t.sim_dir(), LD_PRELOAD=t.shim_path(), GPUMEM_TRACE=trace)
            process = subprocess.Popen([program(), "churn", "2000000"], env=env, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and (not os.path.exists(trace) or os.path.getsize(trace) < 2 << 20):
                time.sleep(0.01)
            time.sleep(random.uniform(0, 0.2))
            process.kill()
            process.wait(timeout=30)
            replayed = t.run([replay_tool(), "--json", trace], preload=False, sim=False)
            self.assertEqual(replayed.returncode, 0, replayed.describe())
            torn = json.loads(replayed.stdout)["torn_rows"]
            self.assertEqual(replayed.stderr.count("is cut short"), torn, replayed.describe())
            with open(trace, "rb") as f:
                self.assertEqual(torn, 0 if f.read().endswith(b"\n") else 1)
            cut_short += torn
        # The same for a trace cut short at every byte of its last row, as a kill can leave it.
        with open(self.path("trace-0.csv"), "rb") as f:
            whole = f.read()
        whole = whole[:whole.rindex(b"\n") + 1]
        last_row_start = whole.rindex(b"\n", 0, len(whole) - 1) + 1
        for cut in range(last_row_start + 1, len(whole) - 1):
            torn_path = self.path("torn.csv")
            with open(torn_path, "wb") as f:
                f.write(whole[:cut])
            replayed = t.run([replay_tool(), "--json", torn_path], preload=False, sim=False)
            self.assertEqual(replayed.returncode, 0, replayed.describe())
            self.assertEqual(json.loads(replayed.stdout)["torn_rows"], 1, replayed.describe())


class CApi(ObserveTestCase):
    def test_through_dlsym_under_the_shim(self):
        result = self.run_program("api", env={"GPUMEM_PREALLOCATE": "0", "GPUMEM_LIMIT": "1GiB"})
        self.assertSucceeded(result)
        out = values(result)
        self.assertEqual(out["found"], "1")
        self.assertEqual(out["trim_before_cuda"], "-1")
        self.assertEqual(out["path_stats_result"], "0")
        self.assertEqual(out["arena_allocs"], "8")
        self.assertEqual(out["arena_bytes"], str(8 * 3 * MIB))
        self.assertEqual(out["bad_path_result"], "-1")
        self.assertEqual(out["bad_device_result"], "-1")
        self.assertEqual(out["dump_null_result"], "-1")
        self.assertEqual(out["dump_result"], "0")
        dump = result.stdout.split("--- dump\n", 1)[1]
        self.assertIn("bfc mode, limit 1073741824 bytes", dump)
        self.assertIn("arena:", dump)
        self.assertIn("in use by chunk size", dump)
        # Everything was freed: the trim synchronised the deferred frees and gave every region back.
        self.assertGreater(int(out["trim_result"]), 24 * MIB - 1)
        self.assertEqual(out["trim_bad_device"], "-1")
        self.assertEqual(out["after_trim_alloc"], "1")

    def test_absent_without_the_shim(self):
        result = self.run_program("api", preload=False)
        self.assertSucceeded(result)
        self.assertEqual(values(result)["found"], "0")


if __name__ == "__main__":
    unittest.main(verbosity=2)
