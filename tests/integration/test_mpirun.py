"""Jobs of many ranks under a real Open MPI (Debian's openmpi-bin, installed by scripts/bootstrap):
`mpirun --oversubscribe -np 4` over the simulator, the shim preloaded, the ranks sharing the simulated
devices (CUDASIM_SHARED_DEVICES) as ranks on one machine share its GPUs.

Four ranks on one GPU with default settings: the first preallocates 75% and the others cannot start;
with GPUMEM_PER_RANK=auto (or gpumem-run --per-rank) each takes its share and all run. On two GPUs,
each rank picking its GPU by local rank, the split is per GPU. The merged report's figures are the
sums of the ranks' own files.

Skipped (exit status 77, which Meson reports as SKIP) when mpirun is not installed.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from gpumem_testlib import TestCase, build_root, job_environment, program_path, rank_lines, source_root, stats_files

MPIRUN = shutil.which("mpirun")
if MPIRUN is None:
    print("SKIP: Open MPI's mpirun is not installed (scripts/bootstrap installs Debian's openmpi-bin)")
    sys.exit(77)

GiB = 1 << 30
RANK_JOB = program_path("rank_job")
GPUMEM_RUN = os.path.join(build_root(), "scripts", "gpumem-run")
REPORT = os.path.join(source_root(), "scripts", "gpumem-report")


class MpirunTest(TestCase):
    def setUp(self):
        self.folder = tempfile.mkdtemp(prefix="gpumem-mpirun-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", self.folder], check=False))

    def mpirun(self, name, bytes_per_rank, env=None, wrapper=()):
        """mpirun -np 4 [wrapper] rank_job: (its exit status, the ranks' lines, output, folder)."""
        folder = os.path.join(self.folder, name)
        os.makedirs(os.path.join(folder, "barrier"))
        environment = job_environment(folder, env, preload=not wrapper)
        # Open MPI refuses root unless told twice; it passes its environment on to every local rank.
        environment.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                            "OMPI_MCA_rmaps_base_oversubscribe": "1"})
        argv = [MPIRUN, "--oversubscribe", "-np", "4", *wrapper, RANK_JOB, str(bytes_per_rank),
                os.path.join(folder, "barrier"), "4"]
        proc = subprocess.run(argv, env=environment, capture_output=True, text=True, timeout=300, errors="replace")
        output = f"$ {' '.join(argv)}\nexit {proc.returncode}\n--- stdout\n{proc.stdout}--- stderr\n{proc.stderr}"
        return proc.returncode, rank_lines(proc.stdout), output, folder

    def test_four_ranks_on_one_gpu(self):
        status, ranks, output, _ = self.mpirun("alone", int(2.5 * GiB))
        self.assertNotEqual(status, 0, output)
        self.assertEqual(len(ranks), 4, output)
        self.assertGreaterEqual(len([r for r in ranks if r.result != "ok"]), 2, output)

        status, ranks, output, folder = self.mpirun("split", int(2.5 * GiB), {"GPUMEM_PER_RANK": "auto"})
        self.assertEqual(status, 0, output)
        self.assertEqual([r.result for r in ranks], ["ok"] * 4, output)
        for rank in range(4):
            self.assertIn(f"launcher Open MPI: rank {rank}(OMPI_COMM_WORLD_RANK), local rank "
                          f"{rank}(OMPI_COMM_WORLD_LOCAL_RANK) of 4(OMPI_COMM_WORLD_LOCAL_SIZE)", output)
        self.assertEqual(output.count(f"device 0: limit {3 * GiB} bytes: 0.75 of total(default) {16 * GiB} / 4 "
                                      f"ranks on this GPU(GPUMEM_PER_RANK)"), 4, output)
        stats = stats_files(folder)
        self.assertEqual(sorted(stats), [0, 1, 2, 3])
        self.assertTrue(all(d["launcher"] == "Open MPI" and d["devices"][0]["limit"] == 3 * GiB
                            for d in stats.values()), stats)

    def test_gpumem_run_under_mpirun(self):
        status, ranks, output, folder = self.mpirun(
            "wrapper", int(2.5 * GiB), wrapper=(GPUMEM_RUN, "--per-rank", "--sim", "--"))
        self.assertEqual(status, 0, output)
        self.assertEqual([r.result for r in ranks], ["ok"] * 4, output)
        self.assertEqual(len(stats_files(folder)), 4)

    def test_two_gpus_split_per_gpu_and_the_merged_report(self):
        two = {"CUDASIM_DEVICES": "2"}
        status, ranks, output, _ = self.mpirun("two-alone", 5 * GiB, two)
        self.assertNotEqual(status, 0, output)
        self.assertGreaterEqual(len([r for r in ranks if r.result != "ok"]), 2, output)

        status, ranks, output, folder = self.mpirun("two-split", 5 * GiB, {**two, "GPUMEM_PER_RANK": "auto"})
        self.assertEqual(status, 0, output)
        self.assertEqual([(r.rank, r.device, r.result) for r in ranks],
                         [(0, 0, "ok"), (1, 1, "ok"), (2, 0, "ok"), (3, 1, "ok")], output)
        files = sorted(os.path.join(folder, name) for name in os.listdir(folder) if name.startswith("stats."))
        self.assertEqual(len(files), 4)
        documents = [json.load(open(f)) for f in files]
        for document in documents:
            self.assertEqual(document["devices"][0]["limit"], 6 * GiB)  # 0.75 x 16 GiB / 2 ranks per GPU
        proc = subprocess.run([REPORT, "--json", *files], capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        merged = json.loads(proc.stdout)
        self.assertEqual(sorted(sorted(g["rank_list"]) for g in merged["gpus"]), [[0, 2], [1, 3]])
        for gpu in merged["gpus"]:
            mine = [d for doc in documents for d in doc["devices"] if d["uuid"] == gpu["gpu"]]
            for figure in ("limit", "peak_in_use", "peak_reserved", "refusals", "allocations"):
                self.assertEqual(gpu[figure], sum(d[figure] for d in mine), figure)
        for figure in ("limit", "peak_in_use", "peak_reserved", "refusals"):
            self.assertEqual(merged["job"][figure], sum(d["devices"][0][figure] for d in documents), figure)
        table = subprocess.run([REPORT, *files], capture_output=True, text=True, timeout=60)
        self.assertEqual(table.returncode, 0, table.stderr)
        self.assertRegex(table.stdout, r"job: 1 host\s+2 GPUs\s+4 ranks\s+sum")


if __name__ == "__main__":
    print(f"mpirun: {MPIRUN}")
    unittest.main(verbosity=2)
