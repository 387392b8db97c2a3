"""The other modes: platform (count only), cuda_async (the driver's stream-ordered pool), off."""

import unittest

from test_mem_common import (DRIVER, GIB, MIB, RUNTIME_PROGRAMS, RUNTIME_SHARED, SIM_TOTAL, MemTestCase,
                             limit_of, values)


class PlatformMode(MemTestCase):
    def test_every_request_reaches_the_driver(self):
        for env in ({"GPUMEM_MODE": "platform"}, {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"},
                    {"TF_GPU_ALLOCATOR": "cuda_malloc"}):
            with self.subTest(env=env):
                result = self.scenario(RUNTIME_SHARED, "churn", 2000, env=env)
                allocations = int(values(result)["allocations"])
                self.assertEqual(result.device(0)["driver_allocs"], allocations, result.describe())
                self.assertEqual(result.device(0)["driver_frees"], allocations)
                self.assertEqual(result.device(0)["bytes_reserved"], 0)

    def test_mem_get_info_reports_the_budget(self):
        result = self.scenario(RUNTIME_SHARED, "info", env={"GPUMEM_MODE": "platform"})
        self.assertOutput(result, before_total=SIM_TOTAL * 3 // 4)


class CudaAsyncMode(MemTestCase):
    def test_synchronous_requests_come_from_the_pool(self):
        for name in RUNTIME_PROGRAMS + (DRIVER,):
            for env in ({"GPUMEM_MODE": "cuda_async"}, {"TF_GPU_ALLOCATOR": "cuda_malloc_async"},
                        {"XLA_PYTHON_CLIENT_ALLOCATOR": "cuda_async"}):
                with self.subTest(program=name, env=env):
                    result = self.scenario(name, "churn", 1000, env=env)
                    device = result.device(0)
                    self.assertEqual(device["driver_allocs"], 0, result.describe())
                    self.assertEqual(device["pool"]["async_allocs"], int(values(result)["allocations"]))
                    # defer: freed blocks go back to the pool only after a context synchronisation,
                    # made once they hold more than the served blocks (and 64 MiB).
                    self.assertLessEqual(device["pool"]["async_frees"], device["pool"]["async_allocs"])
                    self.assertEqual(device["pool"]["async_frees"] > 0, device["context_syncs"] > 0,
                                     result.describe())

    def test_frees_reach_the_pool_after_synchronisation(self):
        result = self.scenario(RUNTIME_SHARED, "churn", 1000,
                               env={"GPUMEM_MODE": "cuda_async", "GPUMEM_FREE_SYNC": "sync"})
        pool = result.device(0)["pool"]
        self.assertEqual(pool["async_allocs"], int(values(result)["allocations"]), result.describe())
        self.assertEqual(pool["async_frees"], pool["async_allocs"])
        self.assertEqual(pool["bytes_used"], 0)

    def test_deferred_frees_go_back_before_they_outgrow_the_served_blocks(self):
        # 10 x 64 MiB, freed, three rounds: the freed blocks wait (defer) only while they hold no
        # more than the blocks still served (or 64 MiB); then one context synchronisation returns
        # them. So the pool never holds more than the live blocks and that much again: here 640 MiB
        # live and at most 64 MiB waiting (without the bound: 1,280 MiB in the second round).
        env = {"GPUMEM_MODE": "cuda_async", "CUDASIM_DEVICE_MEMORY": "2GiB"}
        result = self.scenario(RUNTIME_SHARED, "hold", 10, 64 * MIB, 3, env=env)
        self.assertOutput(result, rounds=3)
        device = result.device(0)
        self.assertEqual(device["pool"]["async_allocs"], 30)
        self.assertLessEqual(device["pool"]["peak_bytes_used"], (640 + 64) * MIB, result.describe())
        self.assertGreaterEqual(device["context_syncs"], 3, result.describe())  # at least one a round
        self.assertGreaterEqual(device["pool"]["async_frees"], 25)

    def test_threads_running_out_together_all_get_the_returned_blocks(self):
        # A small device (about 360 pool blocks of 2 MiB) and 8 threads: the pool runs out again and
        # again, often for several threads at once. Each synchronises and retries; one of them returns
        # the deferred blocks, and the others must find them back in the pool when they retry.
        env = {"GPUMEM_MODE": "cuda_async", "CUDASIM_DEVICE_MEMORY": "1GiB"}
        for attempt in range(3):
            with self.subTest(attempt=attempt):
                result = self.scenario(RUNTIME_SHARED, "threads", 8, 3000, env=env)
                self.assertOutput(result, thread_failures=0)
                self.assertGreater(result.device(0)["context_syncs"], 1, result.describe())

    def test_preallocation_keeps_freed_memory_in_the_pool(self):
        # Release threshold = the limit: freed blocks (each free synchronises, then returns its block
        # to the pool) stay reserved by the pool through later synchronisations.
        env = {"GPUMEM_MODE": "cuda_async", "GPUMEM_FREE_SYNC": "sync"}
        result = self.scenario(RUNTIME_SHARED, "hold", 16, 4 * MIB, env=env)
        self.assertGreaterEqual(result.device(0)["pool"]["bytes_reserved"], 64 * MIB, result.describe())

    def test_growth_gives_freed_memory_back(self):
        # Release threshold 0: at each synchronisation the pool returns what it does not use, so at
        # most the last freed block (returned after the last synchronisation) is still reserved.
        env = {"GPUMEM_MODE": "cuda_async", "GPUMEM_PREALLOCATE": "0", "GPUMEM_FREE_SYNC": "sync"}
        result = self.scenario(RUNTIME_SHARED, "hold", 16, 4 * MIB, env=env)
        self.assertLessEqual(result.device(0)["pool"]["bytes_reserved"], 4 * MIB, result.describe())
        self.assertGreaterEqual(result.device(0)["pool"]["peak_bytes_reserved"], 64 * MIB)

    def test_warm_up_allocates_the_configured_bytes_once(self):
        for env, expected in (({"TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC": "256MiB"}, 256 * MIB),
                              ({"GPUMEM_ASYNC_PREALLOC": "-1", "GPUMEM_LIMIT": "512MiB"}, 512 * MIB)):
            with self.subTest(env=env):
                result = self.scenario(RUNTIME_SHARED, "churn", 10, env=dict(env, GPUMEM_MODE="cuda_async"))
                pool = result.device(0)["pool"]
                self.assertGreaterEqual(pool["peak_bytes_reserved"], expected, result.describe())
                self.assertGreaterEqual(pool["peak_bytes_used"], expected)


class DeviceResetInEveryMode(MemTestCase):
    def test_reset_frees_what_the_program_never_freed_in_every_mode(self):
        # 4 GiB per round on the 16 GiB device, never freed: six rounds pass only if every reset
        # gives it all back, as it does without the shim.
        for name in RUNTIME_PROGRAMS:
            for env in (None, {}, {"GPUMEM_PREALLOCATE": "0"}, {"GPUMEM_MODE": "platform"},
                        {"GPUMEM_MODE": "cuda_async"}, {"GPUMEM_MODE": "cuda_async", "GPUMEM_PREALLOCATE": "0"}):
                with self.subTest(program=name, env=env):
                    result = self.scenario(name, "reset_leaks", 6, 4 * GIB, env=env or {}, preload=env is not None)
                    self.assertOutput(result, rounds=6)


class OffMode(MemTestCase):
    def test_off_behaves_exactly_as_without_the_shim(self):
        plain = self.scenario(RUNTIME_SHARED, "churn", 1000, preload=False)
        off = self.scenario(RUNTIME_SHARED, "churn", 1000, env={"GPUMEM_MODE": "off"})
        self.assertEqual(off.stdout, plain.stdout)
        self.assertEqual(off.device(0)["driver_allocs"], plain.device(0)["driver_allocs"])
        self.assertEqual(off.device(0)["bytes_reserved"], 0)
        self.assertNotEqual(limit_of(0.75, SIM_TOTAL), 0)


if __name__ == "__main__":
    unittest.main()
