"""scripts/gpumem-report: merges the GPUMEM_STATS_FILE JSON files of a job's ranks.

The files are synthetic, written here in the shim's format with known figures, so that every sum the
report prints can be checked exactly; test_mpirun.py merges files the shim wrote under real launchers.
No build is needed: the script runs from the source tree.
"""

import json
import os
import subprocess
import tempfile
import unittest

SOURCE_ROOT = os.environ.get("GPUMEM_TEST_SOURCE_ROOT",
                             os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
REPORT = os.environ.get("GPUMEM_TEST_REPORT") or os.path.join(SOURCE_ROOT, "scripts", "gpumem-report")
GiB = 1 << 30
UUID_A = "GPU-aaaaaaaa-0000-0000-0000-000000000001"
UUID_B = "GPU-bbbbbbbb-0000-0000-0000-000000000002"


def run_report(*args):
    return subprocess.run([REPORT, *map(str, args)], capture_output=True, text=True, timeout=60)


def stats_file(host, rank, local_rank, local_ranks, devices, pid=None):
    """A rank's statistics as the shim writes them (only the fields the report reads, and a few more)."""
    return {"gpumem_version": "0.1.0", "pid": pid if pid is not None else 1000 + rank, "host": host,
            "launcher": "Open MPI", "rank": rank, "local_rank": local_rank, "local_ranks": local_ranks,
            "devices": [dict({"mode": "bfc", "contexts": 1, "ranks_sharing": 2}, **device) for device in devices]}


def device(ordinal, uuid, limit, peak_in_use, peak_reserved, refusals=0):
    return {"device": ordinal, "uuid": uuid, "limit": limit, "peak_in_use": peak_in_use,
            "peak_reserved": peak_reserved, "refusals": refusals, "allocations": 3, "call_ns": 1_500_000}


class ReportTest(unittest.TestCase):
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


if __name__ == "__main__":
    print(f"gpumem-report: {REPORT}")
    unittest.main(verbosity=2)
