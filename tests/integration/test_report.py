"""scripts/gpumem-report: merges the GPUMEM_STATS_FILE JSON files of a job's ranks.

The files are synthetic, written here in the shim's format with known figures, so that every sum the
report prints can be checked exactly; test_mpirun.py merges files the shim wrote under real launchers.
No build is needed: the script runs from the source tree.
"""

import json
import os
import subprocess
import tempfile
import time
import unittest

from tools_testlib import BROKEN_PIPE_STATUS, REPORT, run_closed_stdout, unsafe_characters

GiB = 1 << 30
UUID_A = "GPU-aaaaaaaa-0000-0000-0000-000000000001"
UUID_B = "GPU-bbbbbbbb-0000-0000-0000-000000000002"


def run_report(*args, timeout=60):
    return subprocess.run([REPORT, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def stats_file(host, rank, local_rank, local_ranks, devices, pid=None):
    """A rank's statistics as the shim writes them (only the fields the report reads, and a few more)."""
    return {"gpumem_version": "0.1.0", "pid": pid if pid is not None else 1000 + rank, "host": host,
            "launcher": "Open MPI", "rank": rank, "local_rank": local_rank, "local_ranks": local_ranks,
            "devices": [dict({"mode": "bfc", "contexts": 1, "ranks_sharing": 2}, **device) for device in devices]}


def device(ordinal, uuid, limit, peak_in_use, peak_reserved, refusals=0):
    return {"device": ordinal, "uuid": uuid, "limit": limit, "peak_in_use": peak_in_use,
            "peak_reserved": peak_reserved, "refusals": refusals, "allocations": 3, "call_ns": 1_500_000}


class ReportTestCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="gpumem-report-test-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", self.tmp], check=False))

    def write(self, name, document):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(document if isinstance(document, str) else json.dumps(document))
        return path

    def job(self):
        """Two hosts: on n1 ranks 0-3 share two GPUs (0, 2 on A; 1, 3 on B, rank 3 seeing B as its
        device 0 under its own CUDA_VISIBLE_DEVICES); on n2 rank 4 alone on A's namesake ordinal."""
        return [
            self.write("s.0.json", stats_file("n1", 0, 0, 4, [device(0, UUID_A, 6 * GiB, 5 * GiB, 6 * GiB)])),
            self.write("s.1.json", stats_file("n1", 1, 1, 4, [device(1, UUID_B, 6 * GiB, 4 * GiB, 6 * GiB, 2)])),
            self.write("s.2.json", stats_file("n1", 2, 2, 4, [device(0, UUID_A, 6 * GiB, 3 * GiB, 5 * GiB)])),
            self.write("s.3.json", stats_file("n1", 3, 3, 4, [device(0, UUID_B, 6 * GiB, 1 * GiB, 2 * GiB, 1)])),
            self.write("s.4.json", stats_file("n2", 4, 0, 1, [device(0, UUID_A, 12 * GiB, 7 * GiB, 12 * GiB)])),
        ]


class ReportTest(ReportTestCase):
    def test_json_sums_per_gpu_host_and_job(self):
        files = self.job()
        proc = run_report("--json", *files)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        merged = json.loads(proc.stdout)
        self.assertEqual(len(merged["ranks"]), 5)
        gpus = {(g["host"], g["gpu"]): g for g in merged["gpus"]}
        # A GPU is its UUID on its host, whatever ordinal each rank saw it under.
        self.assertEqual(sorted(gpus), [("n1", UUID_A), ("n1", UUID_B), ("n2", UUID_A)])
        self.assertEqual(gpus[("n1", UUID_A)]["rank_list"], [0, 2])
        self.assertEqual(gpus[("n1", UUID_B)]["rank_list"], [1, 3])
        # Every sum equals the sum of the files' own figures.
        documents = [json.load(open(f)) for f in files]
        for (host, uuid), gpu in gpus.items():
            mine = [d for doc in documents if doc["host"] == host for d in doc["devices"] if d["uuid"] == uuid]
            for figure in ("limit", "peak_in_use", "peak_reserved", "refusals", "allocations", "call_ns"):
                self.assertEqual(gpu[figure], sum(d[figure] for d in mine), (host, uuid, figure))
        hosts = {h["host"]: h for h in merged["hosts"]}
        self.assertEqual(hosts["n1"]["ranks"], 4)
        self.assertEqual(hosts["n1"]["gpus"], 2)
        self.assertEqual(hosts["n1"]["peak_in_use"], 13 * GiB)
        self.assertEqual(merged["job"], {"limit": 36 * GiB, "peak_in_use": 20 * GiB, "peak_reserved": 31 * GiB,
                                         "refusals": 3, "allocations": 15, "call_ns": 7_500_000, "ranks": 5,
                                         "hosts": 2, "gpus": 3})

    def test_table(self):
        proc = run_report(*self.job())
        self.assertEqual(proc.returncode, 0, proc.stderr)
        lines = proc.stdout.splitlines()
        self.assertEqual(lines[0].split()[:6], ["host", "GPU", "device", "rank", "local", "pid"])
        rank_rows = [line.split() for line in lines[1:] if line.split()[1].startswith("GPU-") and " sum " not in line]
        self.assertEqual(sorted(int(row[3]) for row in rank_rows), [0, 1, 2, 3, 4])
        sums = [line for line in lines if " sum " in line]
        self.assertIn("2 ranks", sums[0])
        self.assertTrue(any(line.startswith("job: 2 hosts") and "3 GPUs" in line and "5 ranks" in line
                            and "36.00 GiB" in line and line.endswith("7.500 ms") for line in sums), proc.stdout)
        self.assertEqual(lines[0].split()[-2:], ["alloc", "calls"])
        self.assertTrue(lines[-1].startswith("The peaks of a sum are the sums of the ranks' own peaks"))

    def test_files_without_uuid_or_launcher(self):
        older = {"gpumem_version": "0.0.9", "pid": 77, "devices": [
            {"device": 1, "limit": GiB, "peak_in_use": 10, "peak_reserved": 20, "refusals": 0}]}
        proc = run_report("--json", self.write("old.json", older))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        merged = json.loads(proc.stdout)
        self.assertEqual(merged["gpus"][0]["gpu"], "device 1")
        self.assertEqual(merged["gpus"][0]["host"], "?")
        self.assertIsNone(merged["ranks"][0]["rank"])
        self.assertEqual(merged["ranks"][0]["allocations"], 0)
        self.assertEqual(merged["ranks"][0]["call_ns"], 0)

    def test_errors_are_one_line(self):
        good = self.job()[0]
        cases = {
            "not JSON": (self.write("bad.json", "{nope"), 1, "bad.json: not JSON"),
            "no devices": (self.write("other.json", {"pid": 1}), 1, "not a gpumem statistics file"),
            "negative": (self.write("neg.json", stats_file("n", 0, 0, 1, [device(0, UUID_A, -1, 0, 0)])), 1,
                         "limit is -1"),
            "missing": (os.path.join(self.tmp, "absent.json"), 1, "absent.json"),
            "folder": (self.tmp, 2, "is a folder"),
        }
        for name, (path, status, phrase) in cases.items():
            with self.subTest(case=name):
                proc = run_report(good, path)
                self.assertEqual(proc.returncode, status, proc.stderr)
                self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
                self.assertTrue(proc.stderr.startswith("gpumem-report: "), proc.stderr)
                self.assertIn(phrase, proc.stderr)
                self.assertEqual(proc.stdout, "")
        proc = run_report()
        self.assertEqual(proc.returncode, 2)
        self.assertIn("FILE", proc.stderr)


class HostileFilesTest(ReportTestCase):
    """Files a rank, or whoever can write where they lie, made to break the report or the terminal it
    prints on: each is named in one line (never a traceback), nothing waits, nothing reaches the terminal
    raw."""

    def assertOneLineError(self, proc, status, *phrases):
        described = f"exit {proc.returncode}\n--- stdout\n{proc.stdout}--- stderr\n{proc.stderr}"
        self.assertEqual(proc.returncode, status, described)
        self.assertNotIn("Traceback", proc.stderr, described)
        self.assertEqual(len(proc.stderr.strip().splitlines()), 1, described)
        self.assertTrue(proc.stderr.startswith("gpumem-report: "), described)
        self.assertEqual(unsafe_characters(proc.stderr), [], described)
        for phrase in phrases:
            self.assertIn(phrase, proc.stderr, described)
        self.assertEqual(proc.stdout, "")

    def test_values_out_of_range_are_one_line(self):
        def with_device(**figures):
            return json.dumps(stats_file("n", 0, 0, 1, [dict(device(0, UUID_A, GiB, 0, 0), **figures)]))
        cases = {
            "10^400": (with_device(limit=10 ** 400), ["limit is 1000", "401 digits", "2^64 - 1"]),
            "2^64": (with_device(peak_in_use=1 << 64), ["peak_in_use is 18446744073709551616"]),
            "a float": (with_device(refusals=1.5), ["refusals is 1.5"]),
            "infinity": (with_device(limit=float("inf")), ["limit is Infinity"]),
            "a boolean": (with_device(call_ns=True), ["call_ns is true"]),
            "a list": (with_device(limit=[1]), ["limit is a list"]),
            "lone surrogate": ('{"host": "\\ud800", "devices": []}', ["host is not valid Unicode", "\\ud800"]),
            "host too long": (json.dumps({"host": "h" * 300, "devices": []}), ["300 characters", "at most 255"]),
            "launcher not a name": (json.dumps({"launcher": {"a": 1}, "devices": []}), ["launcher is an object"]),
            "100,000 nested arrays": ('{"devices": [], "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
                                      ["nested more than 64 levels"]),
            "65 levels": ('{"devices": [], "x": ' + "[" * 64 + "]" * 64 + "}", ["nested more than 64 levels"]),
            "not UTF-8": (b'{"host": "\xff", "devices": []}', ["not UTF-8 text (byte 10)"]),
            "digits past Python's limit": ('{"devices": [], "x": ' + "9" * 5000 + "}", ["not JSON"]),
        }
        for name, (text, phrases) in cases.items():
            with self.subTest(case=name):
                path = os.path.join(self.tmp, "hostile.json")
                with open(path, "wb") as f:
                    f.write(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
                self.assertOneLineError(run_report(path), 1, "hostile.json: ", *phrases)
        # 64 levels (the object and 63 arrays) are read.
        path = self.write("deep.json", '{"devices": [], "x": ' + "[" * 63 + "]" * 63 + "}")
        self.assertEqual(run_report(path).returncode, 0)

    def test_a_file_too_large_is_refused_unread(self):
        path = os.path.join(self.tmp, "huge.json")
        with open(path, "wb") as f:
            f.truncate((64 << 20) + 1)  # sparse: nothing is written
        self.assertOneLineError(run_report(path), 1, "huge.json: larger than 64 MiB")

    def test_files_that_are_not_regular_are_refused_without_waiting(self):
        fifo = os.path.join(self.tmp, "stats.fifo.json")
        os.mkfifo(fifo)  # no writer: opening it to read would wait forever
        for path, kind in ((fifo, "is a FIFO"), ("/dev/null", "is a character device"),
                           ("/dev/zero", "is a character device")):
            with self.subTest(path=path):
                started = time.monotonic()
                proc = run_report(self.job()[0], path, timeout=20)
                self.assertOneLineError(proc, 1, f"{path}: {kind}, not a regular file")
                self.assertLess(time.monotonic() - started, 10)

    def test_control_characters_are_escaped(self):
        host = "n\x1b[2J\x1b]0;owned\x07\x9b31m\x7f\u202e"
        uuid = "GPU-\x1b[5m\u0085"
        path = self.write("esc.json", stats_file(host, 0, 0, 1, [device(0, uuid, GiB, 1, 2)]))
        proc = run_report(path)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(unsafe_characters(proc.stdout), [], proc.stdout)
        self.assertIn("n\\x1b[2J\\x1b]0;owned\\x07\\x9b31m\\x7f\\u202e", proc.stdout)
        self.assertIn("GPU-\\x1b[5m\\x85", proc.stdout)
        # JSON: ASCII only, and the names as the file gave them.
        raw = subprocess.run([REPORT, "--json", path], capture_output=True, timeout=60)
        self.assertEqual(raw.returncode, 0, raw.stderr)
        self.assertTrue(raw.stdout.isascii())
        merged = json.loads(raw.stdout)
        self.assertEqual((merged["ranks"][0]["host"], merged["ranks"][0]["uuid"]), (host, uuid))
        # File names: escaped in the error line, bytes that are not UTF-8 included.
        bad = os.path.join(os.fsencode(self.tmp), b"s\x1b[31m\xff.json")
        with open(bad, "w") as f:
            f.write("{nope")
        proc = subprocess.run([REPORT, bad], capture_output=True, timeout=60)
        self.assertEqual(proc.returncode, 1)
        self.assertIn(b"s\\x1b[31m\\xff.json: not JSON", proc.stderr)
        self.assertEqual(unsafe_characters(proc.stderr.decode("utf-8")), [])
        os.rename(bad, os.path.join(os.fsencode(self.tmp), b"s\xff.json"))
        with open(os.path.join(os.fsencode(self.tmp), b"s\xff.json"), "w") as f:
            json.dump(stats_file("n", 0, 0, 1, [device(0, UUID_A, GiB, 1, 2)]), f)
        raw = subprocess.run([REPORT, "--json", os.path.join(os.fsencode(self.tmp), b"s\xff.json")],
                             capture_output=True, timeout=60)
        self.assertEqual(raw.returncode, 0, raw.stderr)
        self.assertTrue(raw.stdout.isascii())
        self.assertTrue(json.loads(raw.stdout)["ranks"][0]["file"].endswith("s\\xff.json"))

    def test_a_closed_pipe_is_quiet(self):
        files = self.job()
        for args in ([], ["--json"]):
            with self.subTest(args=args):
                proc = run_closed_stdout([REPORT, *args, *files])
                self.assertEqual((proc.returncode, proc.stderr), (BROKEN_PIPE_STATUS, ""))
        proc = subprocess.run(["bash", "-c", f'"{REPORT}" --json "$@" | head -c 10', "-", *files * 50],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.stderr, "")
        self.assertEqual(len(proc.stdout), 10)

    def test_many_gpus_are_merged_in_linear_time(self):
        # 20,000 devices of distinct UUIDs: grouping them pairwise took minutes.
        devices = [device(i, f"GPU-{i:08x}-0000-0000-0000-000000000000", GiB, 1, 2) for i in range(20_000)]
        path = self.write("many.json", stats_file("n", 0, 0, 1, devices))
        started = time.monotonic()
        proc = run_report(path, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("20000 GPUs", proc.stdout)
        self.assertLess(time.monotonic() - started, 20)


if __name__ == "__main__":
    print(f"gpumem-report: {REPORT}")
    unittest.main(verbosity=2)
