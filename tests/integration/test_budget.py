"""One memory budget per device: every allocation path (arena, platform allocations, stream-ordered
pools, the program's own pools, virtual memory management, managed memory, arrays) is capped by the
same limit in every mode but off, through the driver API and the shared and static runtimes; what
cuMemGetInfo, cuDeviceTotalMem, cudaGetDeviceProperties and NVML report agrees with it."""

import json
import os
import tempfile
import unittest

import gpumem_testlib as t

MIB = 1 << 20
GIB = 1 << 30
LIMIT = 64 * MIB
DEVICE = {"CUDASIM_DEVICE_MEMORY": "1GiB"}
MODES = {
    "bfc": {},
    "bfc growth": {"GPUMEM_PREALLOCATE": "0"},
    "platform": {"GPUMEM_MODE": "platform"},
    "cuda_async": {"GPUMEM_MODE": "cuda_async"},
}
RUNTIME_PROGRAMS = ("budget_runtime_shared", "budget_runtime_static")


def values(result):
    return t.key_values(result.stdout)


class BudgetTestCase(t.TestCase):
    def run_scenario(self, program, *args, env=None, preload=True, expect_ok=True):
        full_env = dict(DEVICE)
        if preload:
            full_env["GPUMEM_LIMIT"] = str(LIMIT)
        full_env.update(env or {})
        result = t.run([t.program_path(program), *map(str, args)], env=full_env, preload=preload, timeout=120)
        if expect_ok:
            self.assertSucceeded(result)
        return result

    def assertCapped(self, result, key, expected):
        got = values(result)
        self.assertEqual(int(got[key]), expected, result.describe())
        self.assertEqual(got["disagreements"], "0", result.describe())
        self.assertEqual(int(got["total"]), LIMIT, result.describe())
        self.assertEqual(int(got["final_free"]), LIMIT, result.describe())  # every charge refunded
        self.assertEqual(got["nvml"], "loaded")


class EveryPathIsCapped(BudgetTestCase):
    # (scenario arguments, the key that grows, bytes or count at the limit, the refusing call)
    DRIVER_CASES = [
        (("expandable", 2), "segment_mapped", LIMIT, "cuMemCreate"),
        (("xla_vmm", 8), "bytes", LIMIT, "cuMemCreate"),
        (("rmm_async", 8), "bytes", LIMIT, "cuMemAllocFromPoolAsync"),
        (("cupy_managed", 8), "bytes", LIMIT, "cuMemAllocManaged"),
        (("texture", 1024), "arrays", 4, "cuArray3DCreate"),  # 16 MiB each (float4, 1024 x 1024)
    ]

    def test_driver_api_paths_stop_exactly_at_the_limit_in_every_mode(self):
        for mode, env in MODES.items():
            for args, key, expected, call in self.DRIVER_CASES:
                with self.subTest(mode=mode, scenario=args[0]):
                    result = self.run_scenario("budget_scenarios", *args, env=env)
                    self.assertCapped(result, key, expected)
                    stopped = values(result).get("stopped_by", values(result).get("segment_stopped_by"))
                    self.assertEqual(stopped, "CUDA_ERROR_OUT_OF_MEMORY", result.describe())
                    refusals = [line for line in result.stderr.splitlines() if "over this process's budget" in line]
                    self.assertEqual(len(refusals), 1, result.describe())
                    self.assertIn(f"{call} of ", refusals[0])
                    self.assertIn(f"of {LIMIT} bytes charged", refusals[0])

    def test_without_the_shim_the_device_is_the_only_limit(self):
        # Twice what the budget allows, all granted (managed memory is host memory here: bounded by
        # the count, not by the device).
        for (scenario, size), key, expected, _ in self.DRIVER_CASES:
            count = 2 * (LIMIT // (size * MIB) if scenario != "texture" else 4)
            with self.subTest(scenario=scenario):
                result = self.run_scenario("budget_scenarios", scenario, size, count, preload=False)
                self.assertEqual(int(values(result)[key]), 2 * expected, result.describe())

    def test_below_the_limit_the_output_is_the_programs_own(self):
        below = [("expandable", 2, 10), ("xla_vmm", 8, 4), ("rmm_async", 8, 4), ("cupy_managed", 8, 4),
                 ("texture", 1024, 2), ("nccl",), ("vllm_sleep", 4, 4)]
        differs = ("total", "final_free")  # the device's size, or the budget's
        for args in below:
            plain = self.run_scenario("budget_scenarios", *args, preload=False)
            for mode, env in MODES.items():
                with self.subTest(mode=mode, scenario=args[0]):
                    result = self.run_scenario("budget_scenarios", *args, env=env)
                    strip = lambda r: {k: v for k, v in values(r).items() if k not in differs}
                    self.assertEqual(strip(result), strip(plain), result.describe())
                    self.assertEqual(values(result)["disagreements"], "0")

    def test_runtime_paths_in_the_shared_and_static_runtime(self):
        cases = [(("malloc", 8), LIMIT // (8 * MIB)), (("managed", 8), 8), (("pool", 8), 8), (("array", 1024), 4),
                 (("expandable", 2), 32)]
        for program in RUNTIME_PROGRAMS:
            for mode, env in MODES.items():
                for args, blocks in cases:
                    with self.subTest(program=program, mode=mode, scenario=args[0]):
                        result = self.run_scenario(program, *args, env=env)
                        got = values(result)
                        self.assertEqual(got["stopped_by"], "cudaErrorMemoryAllocation", result.describe())
                        self.assertEqual(int(got["blocks"]), blocks, result.describe())
                        self.assertEqual(int(got["total"]), LIMIT)
                        self.assertEqual(int(got["device_properties_total"]), LIMIT)
                        self.assertEqual(int(got["free_when_full"]), 0, result.describe())
                        self.assertEqual(int(got["free_after"]), LIMIT, result.describe())

    def test_off_mode_caps_nothing(self):
        result = self.run_scenario("budget_scenarios", "xla_vmm", 8, env={"GPUMEM_MODE": "off"})
        self.assertGreater(int(values(result)["bytes"]), LIMIT, result.describe())
        self.assertEqual(int(values(result)["total"]), GIB)


class TheArenaDoesNotStarveOtherPaths(BudgetTestCase):
    # A VMM heap and a few small cudaMalloc workspaces (cuBLAS), with a 1 GiB budget.
    ENV = {"CUDASIM_DEVICE_MEMORY": "2GiB", "GPUMEM_LIMIT": "1GiB"}

    def vmm_share(self, result):
        got = values(result)
        return (int(got["heap_mapped"]) + int(got.get("first_heap", 0))) / GIB

    def test_heap_first_then_workspaces_in_the_default_policy(self):
        # The arena sees the heap's charge at its first allocation and grows instead of preallocating.
        result = self.run_scenario("budget_scenarios", "vmm_then_workspaces", 16, env=self.ENV)
        self.assertGreaterEqual(self.vmm_share(result), 0.95, result.describe())
        self.assertIn("the arena grows on demand instead of preallocating", result.stderr + self.info_log())

    def info_log(self):
        result = self.run_scenario("budget_scenarios", "vmm_then_workspaces", 16,
                                   env=dict(self.ENV, GPUMEM_LOG_LEVEL="info"))
        return result.stderr

    def test_workspaces_first_with_growth(self):
        for mode in ({"GPUMEM_PREALLOCATE": "0"}, {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
                     {"GPUMEM_MODE": "platform"}, {"GPUMEM_MODE": "cuda_async"}):
            with self.subTest(env=mode):
                result = self.run_scenario("budget_scenarios", "workspaces_then_vmm", 16, env=dict(self.ENV, **mode))
                self.assertGreaterEqual(self.vmm_share(result), 0.95, result.describe())

    def test_workspaces_first_with_preallocation(self):
        # The preallocated arena is a head (1/32 of the limit, where the workspaces land) and the
        # rest, which goes back whole when the heap needs the budget.
        result = self.run_scenario("budget_scenarios", "workspaces_then_vmm", 16, env=self.ENV)
        self.assertGreaterEqual(self.vmm_share(result), 0.95, result.describe())

    def test_workspaces_larger_than_the_head_keep_the_rest_with_advice(self):
        # Classic regions: 12 MiB of workspaces in a 64 MiB budget (a 2 MiB head) live in the rest,
        # which cannot shrink, so the heap gets little, and the refusal says how to leave room.
        result = self.run_scenario("budget_scenarios", "workspaces_then_vmm", 2,
                                   env={"CUDASIM_DEVICE_MEMORY": "1GiB", "GPUMEM_LIMIT": "64MiB",
                                        "GPUMEM_REGION_SOURCE": "classic"})
        self.assertLess(int(values(result)["heap_mapped"]), 0.95 * (64 - 12) * MIB, result.describe())
        self.assertIn("set GPUMEM_PREALLOCATE=false", result.stderr)

    def test_an_arena_that_grows_already_is_not_told_to_grow(self):
        # Growing on demand helps only a preallocated classic region: an arena that grows already, or
        # maps virtual memory (whose idle granules go back), has given back what it could, and the
        # refusal says so instead.
        for arena, env in (("classic growth", {"GPUMEM_REGION_SOURCE": "classic", "GPUMEM_PREALLOCATE": "false"}),
                           ("vmm preallocated", {"GPUMEM_REGION_SOURCE": "vmm"}),
                           ("vmm growth", {"GPUMEM_REGION_SOURCE": "vmm", "GPUMEM_PREALLOCATE": "false"})):
            with self.subTest(arena=arena):
                result = self.run_scenario("budget_scenarios", "workspaces_then_vmm", 2,
                                           env={"CUDASIM_DEVICE_MEMORY": "1GiB", "GPUMEM_LIMIT": "64MiB", **env})
                self.assertIn("refused: over this process's budget", result.stderr, result.describe())
                self.assertIn("the arena already grows only as needed", result.stderr, result.describe())
                self.assertNotIn("GPUMEM_PREALLOCATE=false", result.stderr, result.describe())

    def test_a_vmm_arena_gives_its_free_end_to_another_path(self):
        # The VMM source: the same workspaces sit at the start of one mapped range, whose free end
        # is unmapped when the heap needs the budget, so the heap gets everything the workspaces
        # leave, in 2 MiB granules.
        result = self.run_scenario("budget_scenarios", "workspaces_then_vmm", 2,
                                   env={"CUDASIM_DEVICE_MEMORY": "1GiB", "GPUMEM_LIMIT": "64MiB",
                                        "GPUMEM_REGION_SOURCE": "vmm"})
        self.assertEqual(int(values(result)["heap_mapped"]), (64 - 12) * MIB, result.describe())

    def test_wholly_free_arena_regions_are_given_back_to_another_path(self):
        # The program's cudaMalloc blocks are all freed (deferred: the device may still use them);
        # when the heap needs the budget, the arena synchronises once and gives its regions back.
        result = self.run_scenario("budget_scenarios", "malloc_free_then_vmm", 16,
                                   env=dict(self.ENV, GPUMEM_PREALLOCATE="0"))
        self.assertEqual(int(values(result)["heap_mapped"]), GIB, result.describe())


class PoolsKeepTheirReserve(BudgetTestCase):
    """A stream-ordered pool keeps what its blocks freed (up to its release threshold): the budget
    charges what the pools hold (pool_reserve), so no path gets memory a pool still holds, and a
    charge that does not fit trims the pools before it is refused. The simulator's report says what
    the device really held at its peak."""

    def run_reported(self, *args, env):
        with tempfile.TemporaryDirectory() as tmp:
            report = os.path.join(tmp, "report.json")
            result = self.run_scenario("budget_scenarios", *args, env=dict(env, CUDASIM_REPORT=report))
            with open(report) as f:
                (device,) = json.load(f)["devices"]
        self.assertEqual(values(result)["disagreements"], "0", result.describe())
        return result, device["peak_bytes_reserved"]

    def test_cuda_async_pool_then_a_vmm_allocation(self):
        # 40 MiB through cuda_async mode's pool, freed (the pool keeps it: its threshold is the limit),
        # then 40 MiB of cuMemCreate: it fits only once the pool gave its 40 MiB back.
        result, peak = self.run_reported("pool_then_create", 40, env={"GPUMEM_MODE": "cuda_async"})
        self.assertEqual(values(result)["created"], "CUDA_SUCCESS", result.describe())
        self.assertLessEqual(peak, LIMIT, result.describe())

    def test_a_programs_pool_that_keeps_everything(self):
        for mode, env in MODES.items():
            with self.subTest(mode=mode):
                result, peak = self.run_reported("own_pool_then_malloc", 40, env=env)
                self.assertEqual(values(result)["allocated"], "CUDA_SUCCESS", result.describe())
                self.assertLessEqual(peak, LIMIT, result.describe())

    def test_threads_on_pools_stay_near_the_limit(self):
        # Eight threads on streams of their own, blocks of 2 to 8 MiB: the budget is reached (refusals),
        # and the device holds at most one 2 MiB growth step per thread more than the limit (the rest of
        # a step charged by the block's bytes, docs/limits.md; without pool_reserve it held three
        # times the limit).
        for mode in ("platform", "cuda_async"):
            with self.subTest(mode=mode):
                result, peak = self.run_reported("pool_threads", 8, env=MODES[mode])
                self.assertGreater(int(values(result)["refusals"]), 0, result.describe())
                self.assertLessEqual(peak, LIMIT + 16 * MIB, result.describe())
                self.assertEqual(int(values(result)["final_free"]), LIMIT, result.describe())

    def test_threads_creating_arrays_stay_within_the_limit(self):
        # Arrays are charged before they are created: 8 threads of three 16 MiB arrays never hold more
        # than the 64 MiB limit at once.
        with tempfile.TemporaryDirectory() as tmp:
            report = os.path.join(tmp, "report.json")
            result = self.run_scenario("budget_scenarios", "array_threads", 8, env={"CUDASIM_REPORT": report})
            with open(report) as f:
                (device,) = json.load(f)["devices"]
        self.assertLessEqual(device["arrays"]["peak_bytes"], LIMIT, result.describe())


class StatisticsPerPath(BudgetTestCase):
    def test_exit_statistics_show_each_paths_charge(self):
        with tempfile.TemporaryDirectory() as tmp:
            stats_file = os.path.join(tmp, "stats.json")
            for args, path, peak in ((("expandable", 2), "vmm", LIMIT), (("cupy_managed", 8), "managed", LIMIT),
                                     (("texture", 1024), "arrays", LIMIT), (("rmm_async", 8), "program_pool", LIMIT)):
                with self.subTest(path=path):
                    self.run_scenario("budget_scenarios", *args, env={"GPUMEM_STATS_FILE": stats_file})
                    with open(stats_file) as f:
                        (device,) = json.load(f)["devices"]
                    budget = device["budget"]
                    self.assertEqual(budget["limit"], LIMIT)
                    self.assertEqual(budget["charged"], 0)  # everything was given back
                    self.assertEqual(budget["peak_charged"], peak)
                    self.assertEqual(budget["paths"][path]["peak_charged"], peak)
                    self.assertGreater(budget["paths"][path]["charges"], 0)
                    # A pool keeps what its blocks freed: charged to pool_reserve until the pool is trimmed.
                    self.assertEqual(budget["paths"]["pool_reserve"]["peak_charged"],
                                     peak if path == "program_pool" else 0, budget)
                    others = {name: p["peak_charged"] for name, p in budget["paths"].items()
                              if name not in (path, "pool_reserve")}
                    self.assertEqual(set(others.values()), {0}, others)


if __name__ == "__main__":
    unittest.main(verbosity=2)
