"""Jobs of many ranks over the simulator, started by hand with each launcher's variables set as the
launcher sets them; the same jobs under a real Open MPI are test_mpirun.py.

Why by hand: Debian's torchrun (python3-torch 1.13) stops at start-up under Python 3.11
(shared/reference/SHARING.md), and a one-node slurmctld + slurmd (with munge) is not something a test
can start and stop reliably in CI, so torchrun's and Slurm's variables (and MPICH's, whose mpiexec is
not installed here) are given here by value, exactly as those launchers give them to each rank.

The ranks share the simulated devices (CUDASIM_SHARED_DEVICES): what one rank holds, another cannot
have, as on one real GPU. Four ranks each needing 2.5 GiB fit a 16 GiB device together; with default
settings (preallocate 75%) the first one takes 12 GiB and the others cannot start, with
GPUMEM_PER_RANK=auto each takes 3 GiB and all run.
"""

import json
import os
import re
import subprocess
import tempfile
import unittest

from gpumem_testlib import (TestCase, build_root, job_environment, launch_by_hand, program_path, shim_path,
                            source_root, stats_files)

GiB = 1 << 30
RANK_JOB = program_path("rank_job")
GPUMEM_RUN = os.path.join(build_root(), "scripts", "gpumem-run")
REPORT = os.path.join(source_root(), "scripts", "gpumem-report")


def torchrun_variables(rank, ranks):
    """What torchrun --standalone --nproc_per_node RANKS gives worker `rank` (one node)."""
    return {"LOCAL_RANK": str(rank), "RANK": str(rank), "GROUP_RANK": "0", "ROLE_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(ranks), "WORLD_SIZE": str(ranks), "ROLE_WORLD_SIZE": str(ranks),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "gpumem-test"}


def slurm_variables(rank, ranks):
    """What `srun -N 2 -n 2*RANKS` gives task `rank` of the second node (node 1)."""
    return {"SLURM_PROCID": str(ranks + rank), "SLURM_LOCALID": str(rank), "SLURM_NODEID": "1",
            "SLURM_STEP_TASKS_PER_NODE": f"{ranks}(x2)", "SLURM_TASKS_PER_NODE": f"{ranks}(x2)",
            "SLURM_NTASKS": str(2 * ranks), "SLURM_STEP_NUM_TASKS": str(2 * ranks), "SLURM_JOB_ID": "4242",
            "SLURM_STEP_ID": "0", "SLURM_NNODES": "2"}


def mpich_variables(rank, ranks):
    """What MPICH's Hydra (mpiexec -n RANKS) gives rank `rank`."""
    return {"PMI_RANK": str(rank), "PMI_SIZE": str(ranks), "MPI_LOCALRANKID": str(rank),
            "MPI_LOCALNRANKS": str(ranks), "PMI_FD": "9"}


LAUNCHERS = {"torchrun": (torchrun_variables, "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
             "Slurm": (slurm_variables, "SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE[SLURM_NODEID]"),
             "MPICH/PMI": (mpich_variables, "MPI_LOCALRANKID", "MPI_LOCALNRANKS")}


class RanksTest(TestCase):
    def setUp(self):
        self.folder = tempfile.mkdtemp(prefix="gpumem-ranks-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", self.folder], check=False))

    def job(self, name, variables, ranks, bytes_per_rank, env=None, argv_prefix=()):
        """Runs RANKS ranks of rank_job in a folder of their own: (ranks' results, folder)."""
        folder = os.path.join(self.folder, name)
        os.makedirs(os.path.join(folder, "barrier"))
        environment = job_environment(folder, env)
        argv = [*argv_prefix, RANK_JOB, bytes_per_rank, os.path.join(folder, "barrier"), ranks]
        return launch_by_hand(argv, [variables(rank, ranks) for rank in range(ranks)], environment), folder

    def describe(self, results):
        return "\n".join(f"rank {r.rank} (local {r.local_rank}, device {r.device}): {r.result}, exit "
                         f"{r.returncode}\n{r.stderr}" for r in results)

    def test_four_ranks_on_one_gpu(self):
        for launcher, (variables, local_rank_variable, local_ranks_variable) in LAUNCHERS.items():
            with self.subTest(launcher=launcher):
                alone, _ = self.job(f"{launcher}-alone".replace("/", "-"), variables, 4, int(2.5 * GiB))
                refused = [r for r in alone if r.result != "ok"]
                # The first rank takes 12 GiB of the 16: at most one other fits beside it.
                self.assertGreaterEqual(len(refused), 2, self.describe(alone))
                self.assertTrue(all(r.returncode == 1 for r in refused), self.describe(alone))

                split, folder = self.job(f"{launcher}-split".replace("/", "-"), variables, 4, int(2.5 * GiB),
                                         {"GPUMEM_PER_RANK": "auto"})
                self.assertEqual([r.result for r in split], ["ok"] * 4, self.describe(split))
                self.assertEqual(sorted(r.local_rank for r in split), [0, 1, 2, 3])
                for result in split:
                    # The info line: the launcher recognised, what it gave, and the split.
                    self.assertRegex(result.stderr, re.escape(
                        f"device 0: limit {3 * GiB} bytes: 0.75 of total(default) {16 * GiB} / 4 ranks on this "
                        f"GPU(GPUMEM_PER_RANK)") + r" \(GPU-[0-9a-f-]{36}\); " + re.escape(
                        f"launcher {launcher}: rank {result.rank}") + r"\(\w+\), " + re.escape(
                        f"local rank {result.local_rank}({local_rank_variable}) of 4({local_ranks_variable})"))
                stats = stats_files(folder)
                self.assertEqual(sorted(stats), sorted(r.rank for r in split))
                for document in stats.values():
                    self.assertEqual(document["launcher"], launcher)
                    self.assertEqual(document["local_ranks"], 4)
                    (device,) = document["devices"]
                    self.assertEqual(device["limit"], 3 * GiB)
                    self.assertEqual(device["ranks_sharing"], 4)
                    self.assertEqual(device["refusals"], 0)

    def test_ranks_on_two_gpus_split_per_gpu(self):
        two = {"CUDASIM_DEVICES": "2"}
        alone, _ = self.job("two-alone", torchrun_variables, 4, 5 * GiB, two)
        self.assertGreaterEqual(len([r for r in alone if r.result != "ok"]), 2, self.describe(alone))
        split, folder = self.job("two-split", torchrun_variables, 4, 5 * GiB, {**two, "GPUMEM_PER_RANK": "auto"})
        self.assertEqual([r.result for r in split], ["ok"] * 4, self.describe(split))
        self.assertEqual([r.device for r in split], [0, 1, 0, 1])  # each picks local rank % 2
        stats = stats_files(folder)
        uuids = {}
        for rank, document in stats.items():
            (device,) = document["devices"]
            self.assertEqual(device["limit"], 6 * GiB)  # 0.75 x 16 GiB / 2 ranks on each GPU
            self.assertEqual(device["ranks_sharing"], 2)
            uuids.setdefault(device["uuid"], []).append(rank)
        self.assertEqual(sorted(uuids.values()), [[0, 2], [1, 3]])

    def test_merged_report_equals_the_sum_of_the_ranks(self):
        env = {"CUDASIM_DEVICES": "2", "GPUMEM_PER_RANK": "auto",
               "GPUMEM_TRACE": os.path.join(self.folder, "report", "trace.%r.%l.csv")}
        results, folder = self.job("report", slurm_variables, 4, GiB, env)
        self.assertEqual([r.result for r in results], ["ok"] * 4, self.describe(results))
        files = sorted(os.path.join(folder, name) for name in os.listdir(folder) if name.startswith("stats."))
        host = os.uname().nodename
        self.assertEqual([os.path.basename(f) for f in files], [f"stats.{host}.{r}.json" for r in range(4, 8)])
        proc = subprocess.run([REPORT, "--json", *files], capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        merged = json.loads(proc.stdout)
        documents = [json.load(open(f)) for f in files]
        self.assertEqual(len(merged["gpus"]), 2)
        for gpu in merged["gpus"]:
            mine = [d for doc in documents for d in doc["devices"] if d["uuid"] == gpu["gpu"]]
            self.assertEqual(len(mine), 2)
            for figure in ("limit", "peak_in_use", "peak_reserved", "refusals"):
                self.assertEqual(gpu[figure], sum(d[figure] for d in mine), figure)
            self.assertEqual(gpu["peak_in_use"], 2 * GiB)
        self.assertEqual(merged["job"]["peak_in_use"], 4 * GiB)
        self.assertEqual(merged["job"]["limit"], 4 * 6 * GiB)
        # The ranks' traces (%r: the rank, %l: the local rank) drawn on one time axis.
        traces = sorted(os.path.join(self.folder, "report", f"trace.{4 + r}.{r}.csv") for r in range(4))
        plot = subprocess.run([os.path.join(source_root(), "scripts", "gpumem-plot"), "--text", *traces],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(plot.returncode, 0, plot.stderr)
        for r in range(4):
            self.assertIn(f"trace.{4 + r}.{r}.csv device {r % 2}: 1 allocations, 1 frees, 0 refusals, "
                          f"peak in use {GiB} bytes", plot.stdout)

    def test_gpumem_run_per_rank(self):
        printed = subprocess.run([GPUMEM_RUN, "--per-rank", "--print-env"], capture_output=True, text=True,
                                 timeout=60)
        self.assertEqual(printed.returncode, 0, printed.stderr)
        self.assertIn("export GPUMEM_PER_RANK=auto\n", printed.stdout)
        results, folder = self.job("wrapper", torchrun_variables, 4, int(2.5 * GiB), {"LD_PRELOAD": ""},
                                   argv_prefix=(GPUMEM_RUN, "--per-rank", "--sim", "--"))
        self.assertEqual([r.result for r in results], ["ok"] * 4, self.describe(results))
        self.assertTrue(all(d["devices"][0]["limit"] == 3 * GiB for d in stats_files(folder).values()))

    def test_a_bad_launcher_value_leaves_that_value_alone_unknown(self):
        # LOCAL_WORLD_SIZE unreadable: the number of local ranks is unknown, so GPUMEM_PER_RANK=auto
        # counts this rank alone (0.75 of the 16 GiB device); its local rank still counts. The shim is
        # active: it manages the memory and writes the statistics.
        def bad(rank, ranks):
            return {"LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "four"}
        results, folder = self.job("bad", bad, 1, GiB, {"GPUMEM_PER_RANK": "auto"})
        (result,) = results
        self.assertEqual(result.result, "ok")
        errors = [line for line in result.stderr.splitlines() if line.startswith("gpumem: LOCAL")]
        self.assertEqual(errors, ['gpumem: LOCAL_WORLD_SIZE="four" is not a number of ranks (a decimal number, 1 or '
                                  "more); ignored: the launcher's number of local ranks is unknown"])
        (document,) = stats_files(folder).values()
        self.assertEqual((document["launcher"], document["local_rank"], document["local_ranks"]), ("torchrun", 0, None))
        self.assertEqual(document["devices"][0]["limit"], 12 * GiB)

    def test_cluster_limits_bound_the_budget(self):
        def alone(rank, ranks):
            return {}
        cases = {
            "HAMi": ({"CUDA_DEVICE_MEMORY_LIMIT": "2g"}, 2 * GiB, "CUDA_DEVICE_MEMORY_LIMIT=2g"),
            "HAMi per device": ({"CUDA_DEVICE_MEMORY_LIMIT": "8g", "CUDA_DEVICE_MEMORY_LIMIT_0": "1500m"},
                                1500 << 20, "CUDA_DEVICE_MEMORY_LIMIT_0=1500m"),
            "MPS": ({"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=1G,1=2G"}, GiB, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=1G"),
            "GPUMEM_LIMIT per device": ({"GPUMEM_LIMIT": "0=3GiB,1=5GiB"}, 3 * GiB, "GPUMEM_LIMIT for device 0"),
            "lowest wins": ({"CUDA_DEVICE_MEMORY_LIMIT": "2g", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4G"},
                            2 * GiB, "CUDA_DEVICE_MEMORY_LIMIT=2g = 2147483648 (the lowest, in force)"),
        }
        for name, (env, limit, named) in cases.items():
            with self.subTest(case=name):
                results, folder = self.job(name.replace(" ", "-"), alone, 1, 512 << 20, env)
                (result,) = results
                self.assertEqual(result.result, "ok", self.describe(results))
                self.assertIn(f"device 0: limit {limit} bytes: ", result.stderr)
                self.assertIn(named, result.stderr)
                (document,) = stats_files(folder).values()
                self.assertEqual(document["devices"][0]["limit"], limit)
                self.assertIsNone(document["launcher"])
                # What the program reads agrees: the budget is the device as the program sees it.
        results, _ = self.job("hami-bad", alone, 1, GiB, {"CUDA_DEVICE_MEMORY_LIMIT": "2GiB"})
        self.assertIn('gpumem: CUDA_DEVICE_MEMORY_LIMIT="2GiB" is not a memory size as HAMi writes it',
                      results[0].stderr)


if __name__ == "__main__":
    print(f"shim: {shim_path()}")
    unittest.main(verbosity=2)
