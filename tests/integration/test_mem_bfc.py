"""bfc mode (the default): one arena per context, preallocated or grown, over the simulated driver."""

import os
import subprocess
import unittest

import gpumem_testlib as lib

from test_mem_common import (CLASSIC, DRIVER, GIB, MIB, RUNTIME_PER_THREAD, RUNTIME_PROGRAMS, RUNTIME_SHARED,
                             SIM_CONTEXT_OVERHEAD, SIM_TOTAL, MemTestCase, arena_driver_allocations, gpumem_lines,
                             head_of, limit_of, preallocated_regions, program, values)

LIMIT = limit_of(0.75, SIM_TOTAL)


class Preallocation(MemTestCase):
    """The shape of a preallocated arena of classic regions (VmmSource: of virtual memory)."""

    region_source = CLASSIC

    def test_three_quarters_preallocated_serve_10k_requests(self):
        # The limit in two regions: a head of 1/32 (small blocks go there first) and the rest.
        for name in RUNTIME_PROGRAMS + (DRIVER,):
            with self.subTest(program=name):
                result = self.scenario(name, "churn", 10000)
                device = result.device(0)
                self.assertEqual(device["driver_allocs"], 2, result.describe())
                self.assertEqual(device["largest_alloc"], LIMIT - head_of(LIMIT))
                self.assertEqual(device["peak_bytes_reserved"], limit_of(0.75, SIM_TOTAL))
                if name != DRIVER:  # the driver program releases its context (and the arena) at exit
                    self.assertEqual(device["bytes_reserved"], limit_of(0.75, SIM_TOTAL))

    def test_without_the_shim_every_request_reaches_the_driver(self):
        result = self.scenario(RUNTIME_SHARED, "churn", 2000, preload=False)
        self.assertEqual(result.device(0)["driver_allocs"], int(values(result)["allocations"]))

    def test_fraction_limit_and_free_basis(self):
        cases = [
            ({"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"}, limit_of(0.5, SIM_TOTAL)),
            ({"XLA_CLIENT_MEM_FRACTION": "0.25"}, limit_of(0.25, SIM_TOTAL)),
            ({"GPUMEM_MEM_FRACTION": "0.3", "XLA_CLIENT_MEM_FRACTION": "0.9"}, limit_of(0.3, SIM_TOTAL)),
            ({"GPUMEM_LIMIT": "1GiB"}, GIB),
            ({"GPUMEM_LIMIT": "1GiB", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"}, GIB),
            ({"GPUMEM_FRACTION_OF": "free"}, limit_of(0.75, SIM_TOTAL - SIM_CONTEXT_OVERHEAD)),
        ]
        for env, expected in cases:
            with self.subTest(env=env):
                result = self.scenario(RUNTIME_SHARED, "churn", 200, env=env)
                self.assertEqual(result.device(0)["driver_allocs"], preallocated_regions(expected), result.describe())
                # largest_alloc is the size asked of the driver (bytes_reserved is rounded by it).
                self.assertEqual(result.device(0)["largest_alloc"], expected - head_of(expected), result.describe())
                # The driver rounds each of the two regions up to 512 bytes.
                self.assertLess(result.device(0)["peak_bytes_reserved"] - expected, 1024, result.describe())
                self.assertGreaterEqual(result.device(0)["peak_bytes_reserved"], expected)

    def test_refused_preallocation_backs_off_with_a_warning(self):
        # The 1 GiB head fits; the 13 GiB rest does not beside it and the context's 300 MiB on a
        # 14 GiB device: 0.9x is retried.
        env = {"CUDASIM_DEVICE_MEMORY": "14GiB", "GPUMEM_MEM_FRACTION": "1"}
        result = self.scenario(RUNTIME_SHARED, "churn", 100, env=env)
        device = result.device(0)
        self.assertEqual(device["driver_allocs"], 2)  # refused requests are not counted
        self.assertLess(device["largest_alloc"], 13 * GIB)
        self.assertGreaterEqual(device["largest_alloc"], int(0.9 * 13 * GIB) // 256 * 256 - 256)
        self.assertTrue(any("preallocation" in line for line in gpumem_lines(result)), result.describe())


class Growth(MemTestCase):
    """How an arena of classic regions grows (VmmSource: of virtual memory)."""

    region_source = CLASSIC

    def test_regions_of_the_growth_floor_as_the_arena_fills(self):
        for env in ({"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, {"TF_FORCE_GPU_ALLOW_GROWTH": "true"},
                    {"GPUMEM_PREALLOCATE": "0"}):
            with self.subTest(env=env):
                result = self.scenario(RUNTIME_SHARED, "hold", 40, MIB, env=env)
                device = result.device(0)
                # 40 x 1 MiB held at once: five regions of the 8 MiB floor, each holding eight.
                self.assertEqual(device["driver_allocs"], 5, result.describe())
                self.assertEqual(device["peak_bytes_reserved"], 40 * MIB)
                self.assertEqual(device["largest_alloc"], 8 * MIB)

    def test_a_request_above_the_floor_gets_a_region_of_its_size(self):
        result = self.scenario(RUNTIME_SHARED, "hold", 2, 12 * MIB, env={"GPUMEM_PREALLOCATE": "0"})
        device = result.device(0)
        self.assertEqual(device["driver_allocs"], 2, result.describe())
        self.assertEqual(device["peak_bytes_reserved"], 24 * MIB)
        self.assertEqual(device["largest_alloc"], 12 * MIB)

    def test_garbage_collection_gives_free_regions_back_before_out_of_memory(self):
        env = {"GPUMEM_PREALLOCATE": "0", "GPUMEM_LIMIT": "64MiB"}
        result = self.scenario(RUNTIME_SHARED, "gc", 30, MIB, 48 * MIB, env=env)
        self.assertOutput(result, big="cudaSuccess")
        self.assertGreater(result.device(0)["driver_frees"], 0)
        self.assertLessEqual(result.device(0)["peak_bytes_reserved"], 64 * MIB)

        off = self.scenario(RUNTIME_SHARED, "gc", 30, MIB, 48 * MIB,
                            env=dict(env, GPUMEM_GARBAGE_COLLECTION="0"))
        self.assertOutput(off, big="cudaErrorMemoryAllocation")
        self.assertEqual(off.device(0)["driver_frees"], 0)


class WhatTheProgramSees(MemTestCase):
    def test_mem_get_info_reports_the_arena(self):
        result = self.scenario(RUNTIME_SHARED, "info")
        got = {k: int(v) for k, v in values(result).items()}
        limit = limit_of(0.75, SIM_TOTAL)
        self.assertEqual(got["before_total"], limit)
        self.assertEqual(got["after_total"], limit)
        self.assertEqual(got["before_free"], limit)
        self.assertEqual(got["after_free"], limit - 64 * MIB)

    def test_mem_get_info_never_exceeds_what_the_device_has(self):
        # A fraction of 1 on the total cannot fit beside the context: free stays below the device's.
        result = self.scenario(RUNTIME_SHARED, "info", env={"GPUMEM_MEM_FRACTION": "1"})
        got = {k: int(v) for k, v in values(result).items()}
        self.assertEqual(got["before_total"], SIM_TOTAL)
        self.assertLessEqual(got["before_free"], SIM_TOTAL - SIM_CONTEXT_OVERHEAD)

    def test_mem_get_info_answers_null_outputs_as_the_driver_does_in_every_mode(self):
        plain = values(self.scenario(DRIVER, "info_null", preload=False))
        null_keys = [key for key in plain if "_null_" in key]
        self.assertEqual(len(null_keys), 6)
        self.assertEqual({plain[key] for key in null_keys}, {"CUDA_ERROR_INVALID_VALUE"})
        for env in ({}, {"GPUMEM_PREALLOCATE": "0"}, {"GPUMEM_MODE": "platform"}, {"GPUMEM_MODE": "cuda_async"},
                    {"GPUMEM_MODE": "off"}, {"GPUMEM_LIMIT": "lots"}):  # the last: inert, with an error line
            with self.subTest(env=env):
                result = self.scenario(DRIVER, "info_null", env=env)
                self.assertEqual({key: values(result)[key] for key in null_keys},
                                 {key: plain[key] for key in null_keys}, result.describe())
        self.assertOutput(self.scenario(DRIVER, "info_null"), total=LIMIT)

    def test_out_of_memory_is_reported_like_the_driver_and_logged(self):
        for name in RUNTIME_PROGRAMS:
            with self.subTest(program=name):
                result = self.scenario(name, "oom", 13 * GIB)
                self.assertOutput(result, status="cudaErrorMemoryAllocation")
                self.assertTrue(any("out of memory" in line for line in gpumem_lines(result)),
                                result.describe())
        plain = self.scenario(RUNTIME_SHARED, "oom", 17 * GIB, preload=False)
        self.assertOutput(plain, status="cudaErrorMemoryAllocation")

    def test_foreign_interior_and_double_frees_get_the_drivers_answer(self):
        invalid = {RUNTIME_SHARED: "cudaErrorInvalidValue", DRIVER: "CUDA_ERROR_INVALID_VALUE"}
        for name, error in invalid.items():
            for preload in (True, False):
                with self.subTest(program=name, preload=preload):
                    result = self.scenario(name, "bad_frees", preload=preload)
                    self.assertOutput(result, interior=error, double=error, foreign=error, after_ok=1)

    def test_double_frees_in_the_other_modes_get_the_drivers_answer(self):
        invalid = {RUNTIME_SHARED: "cudaErrorInvalidValue", DRIVER: "CUDA_ERROR_INVALID_VALUE"}
        for name, error in invalid.items():
            for mode in ("cuda_async", "platform"):
                for free_sync in ("defer", "sync"):
                    with self.subTest(program=name, mode=mode, free_sync=free_sync):
                        result = self.scenario(name, "bad_frees",
                                               env={"GPUMEM_MODE": mode, "GPUMEM_FREE_SYNC": free_sync})
                        self.assertOutput(result, interior=error, double=error, foreign=error, after_ok=1)

    def test_stream_ordered_calls_the_driver_refuses_are_refused_in_every_mode(self):
        # cudaFreeAsync of cudaMalloc memory, and allocation or free on a destroyed stream.
        for name in RUNTIME_PROGRAMS:
            plain = self.scenario(name, "async_misuse", preload=False)
            self.assertOutput(plain, free_async_of_malloc="cudaErrorInvalidValue", malloc_block_kept=1,
                              alloc_on_destroyed="cudaErrorInvalidResourceHandle",
                              free_on_destroyed="cudaErrorInvalidResourceHandle", free_after="cudaSuccess")
            for env in ({}, {"GPUMEM_PREALLOCATE": "0"}, {"GPUMEM_MODE": "platform"}, {"GPUMEM_MODE": "cuda_async"}):
                with self.subTest(program=name, env=env):
                    self.assertEqual(self.scenario(name, "async_misuse", env=env).stdout, plain.stdout)

    def test_zero_byte_allocation_is_an_invalid_value(self):
        for preload in (True, False):
            with self.subTest(preload=preload):
                self.assertOutput(self.scenario(DRIVER, "zero", preload=preload), zero="CUDA_ERROR_INVALID_VALUE")

    def test_refusals_get_the_drivers_own_answers_in_every_mode(self):
        # cuMemAllocPitch whose size overflows: out of memory (more than any device holds), not an
        # invalid value; cuMemRetainAllocationHandle on cuMemAlloc memory: invalid, also where a
        # VMM-backed arena maps that memory itself (its handle never reaches the program).
        plain = self.scenario(DRIVER, "driver_answers", preload=False)
        self.assertEqual(values(plain), {
            "pitch_huge_width": "CUDA_ERROR_OUT_OF_MEMORY", "pitch_huge_rows": "CUDA_ERROR_OUT_OF_MEMORY",
            "pitch_no_width": "CUDA_ERROR_INVALID_VALUE",
            "retain": "CUDA_ERROR_INVALID_VALUE", "retain_inside": "CUDA_ERROR_INVALID_VALUE"}, plain.describe())
        for env in ({}, {"GPUMEM_PREALLOCATE": "0"}, {"GPUMEM_REGION_SOURCE": "vmm"},
                    {"GPUMEM_REGION_SOURCE": "vmm", "GPUMEM_PREALLOCATE": "0"}, {"GPUMEM_MODE": "platform"},
                    {"GPUMEM_MODE": "cuda_async"}):
            with self.subTest(env=env):
                result = self.scenario(DRIVER, "driver_answers", env=env)
                self.assertEqual(result.stdout, plain.stdout, result.describe())

    def test_pitch_matches_the_driver(self):
        plain = self.scenario(RUNTIME_SHARED, "pitch", preload=False)
        shimmed = self.scenario(RUNTIME_SHARED, "pitch")
        self.assertEqual(values(shimmed)["pitch"], values(plain)["pitch"])
        self.assertOutput(shimmed, last_row_ok=1)
        self.assertEqual(shimmed.device(0)["driver_allocs"], 0)  # the arena's, none from cuMemAllocPitch

    def test_blocks_start_at_the_texture_alignment_in_every_mode(self):
        # CUDA documents that cudaMalloc's memory binds to a texture with no offset: every block, plain,
        # pitched or stream-ordered, starts at a multiple of the texture alignment (512), also where
        # its size rounds to an odd multiple of the arena's 256-byte granule.
        plain = self.scenario(RUNTIME_SHARED, "texture_alignment", preload=False)
        self.assertOutput(plain, texture_alignment=512, misaligned=0, texture_failures=0)
        for env in ({}, {"GPUMEM_PREALLOCATE": "0"}, CLASSIC, dict(CLASSIC, GPUMEM_PREALLOCATE="0"),
                    {"GPUMEM_MODE": "platform"}, {"GPUMEM_MODE": "cuda_async"}):
            with self.subTest(env=env):
                result = self.scenario(RUNTIME_SHARED, "texture_alignment", env=env)
                self.assertOutput(result, texture_alignment=512, misaligned=0, texture_failures=0)

    def test_ipc_of_a_sub_allocation_gets_a_handle(self):
        # A block inside a region gets gpumem's handle (docs/ipc.md, test_ipc.py opens it elsewhere).
        result = self.scenario(DRIVER, "ipc", env=CLASSIC)
        got = values(result)
        self.assertEqual(got["ipc_second"], "CUDA_SUCCESS")
        self.assertEqual(got["ipc_first"], "CUDA_SUCCESS")
        self.assertEqual(got["range_base_is_second"], "0")  # the address range is the whole region
        self.assertEqual(int(got["range_size"]), head_of(LIMIT))  # small blocks live in the head
        self.assertEqual(gpumem_lines(result), [], result.describe())


class Contexts(MemTestCase):
    """One arena per context, with either region source: an arena's driver allocations are counted
    against those of one arena alone (one classic region or two, or the pieces of its virtual memory)."""

    def one_arena(self, name, env=None) -> int:
        """The physical allocations one preallocated arena of `name`'s context makes, with `env`."""
        return arena_driver_allocations(self.scenario(name, "churn", 1, env=env).device(0))

    def test_two_devices_get_separate_arenas(self):
        for source in ({}, CLASSIC):
            with self.subTest(source=source):
                result = self.scenario(RUNTIME_SHARED, "two_devices", env={**source, "CUDASIM_DEVICES": "2"})
                self.assertOutput(result, devices=2, device0_total=limit_of(0.75, SIM_TOTAL),
                                  device1_total=limit_of(0.75, SIM_TOTAL))
                for ordinal in (0, 1):
                    device = result.device(ordinal)
                    self.assertEqual(arena_driver_allocations(device), self.one_arena(RUNTIME_SHARED, source),
                                     result.describe())
                    self.assertEqual(device["bytes_reserved"], limit_of(0.75, SIM_TOTAL))

    def assertArenaPerContext(self, scenario, **expected):
        # The simulator hands a destroyed context's handle out again: an arena kept for it would
        # serve the new context from memory the driver already freed.
        for source in ({}, CLASSIC):
            with self.subTest(source=source):
                result = self.scenario(DRIVER, scenario, env=source)
                self.assertOutput(result, **expected)
                device = result.device(0)
                self.assertEqual(arena_driver_allocations(device), 2 * self.one_arena(DRIVER, source))
                self.assertEqual(device["bytes_reserved"], 0)  # the driver freed both with their contexts

    def test_destroyed_context_forgets_its_arena(self):
        self.assertArenaPerContext("context_lifecycle", contexts=2, same_handle=1)

    def test_primary_context_reset_forgets_its_arena(self):
        self.assertArenaPerContext("primary_reset", resets=2)

    def test_primary_context_released_to_zero_forgets_its_arena(self):
        self.assertArenaPerContext("primary_release", releases=2)

    def test_threads_share_the_context_arena(self):
        for name in RUNTIME_PROGRAMS:
            for scenario in ("threads", "async_threads"):
                # 12 MiB: the threads' blocks (up to 8 x 16 x 64 KiB live) must reuse each other's.
                for env in ({}, {"GPUMEM_LIMIT": "12MiB"}, CLASSIC, {**CLASSIC, "GPUMEM_LIMIT": "12MiB"}):
                    with self.subTest(program=name, scenario=scenario, env=env):
                        result = self.scenario(name, scenario, 8, 1500, env=env)
                        self.assertOutput(result, thread_failures=0)
                        self.assertEqual(arena_driver_allocations(result.device(0)), self.one_arena(name, env))

    def test_fork_child_starts_fresh_and_parent_is_unaffected(self):
        result = self.scenario(RUNTIME_SHARED, "fork")
        got = values(result)
        self.assertEqual(got.get("parent_ok"), "1", result.describe())
        self.assertEqual(got.get("child_exit"), "0", result.describe())
        self.assertIn("child_status", got, result.describe())
        # The parent's arena is not the child's: before its first allocation the child has none.
        self.assertEqual(got.get("parent_stats"), "0", result.describe())
        self.assertEqual(got.get("child_stats"), "-1", result.describe())
        plain = self.scenario(RUNTIME_SHARED, "fork", preload=False)
        self.assertEqual(values(plain)["child_status"], got["child_status"], plain.describe())

    def test_fork_while_another_thread_creates_contexts_does_not_deadlock(self):
        # Each context creation is logged at info. At that level the first message written is one of
        # these, so the logger's fork handler is registered after the registry's and a fork takes the
        # log lock first: logging while the registry is locked would deadlock against it.
        for mode in ("bfc", "cuda_async"):
            with self.subTest(mode=mode):
                result = self.scenario(DRIVER, "fork_while_creating", 200,
                                       env={"GPUMEM_MODE": mode, "GPUMEM_LOG_LEVEL": "info"})
                self.assertOutput(result, forked=1)


class HotPath(MemTestCase):
    def test_no_heap_allocation_after_warm_up(self):
        # After warm-up, cuMemAlloc/cuMemFree served by the arena make no heap allocation on the
        # calling thread (preallocated or grown) when the free path needs no driver call; the plain
        # driver's count shows that the probe counts. (free_sync=sync, and growth's occasional
        # synchronisation, call the driver, whose own allocations the probe cannot tell apart.)
        plain = self.scenario("mem_hot_path", 5000, preload=False)
        self.assertGreater(int(values(plain)["heap_allocs"]), 0, plain.describe())
        for env in ({}, {"GPUMEM_FREE_SYNC": "none"},
                    {"GPUMEM_PREALLOCATE": "false", "GPUMEM_FREE_SYNC": "none"}):
            with self.subTest(env=env):
                result = self.scenario("mem_hot_path", 5000, env=env)
                self.assertOutput(result, heap_allocs=0, operations=5000)

    def test_growth_with_defer_synchronises_once_per_many_allocations(self):
        # 32 blocks live at a time: growth settles near twice the live set and synchronises about
        # once per live set's worth of allocations (the program itself synchronises 10 times).
        result = self.scenario("mem_hot_path", 5000, env={"GPUMEM_PREALLOCATE": "false"})
        shim_syncs = result.device(0)["context_syncs"] - 10
        self.assertGreater(shim_syncs, 0, result.describe())
        self.assertLessEqual(shim_syncs, 2 * 10000 // 32, result.describe())  # 10,000 allocations


    def test_deferred_frees_are_resolved_in_batches(self):
        # A loop that never synchronises: with defer, one synchronisation per 1,024 deferred frees
        # keeps the fenced chunks from piling up; none needs no synchronisation at all.
        frees = 2 * 5000 - 32  # warm-up and measured loops; the last 32 blocks are freed after
        result = self.scenario("mem_hot_path", 5000, 0, env={})
        self.assertOutput(result, operations=5000)
        self.assertEqual(result.device(0)["context_syncs"], frees // 1024, result.describe())
        result = self.scenario("mem_hot_path", 5000, 0, env={"GPUMEM_FREE_SYNC": "none"})
        self.assertEqual(result.device(0)["context_syncs"], 0, result.describe())


class StatsApi(MemTestCase):
    def test_gpumem_get_stats_reports_the_arena(self):
        # Classic: a head and the rest, two cuMemAlloc calls; virtual memory: one region, mapped in
        # pieces, each a cuMemCreate.
        for name in RUNTIME_PROGRAMS:
            for source, regions in (({}, 1), (CLASSIC, 2)):
                with self.subTest(program=name, source=source):
                    result = self.scenario(name, "stats", 1000, env=source)
                    got = values(result)
                    allocations = int(got["allocations"])
                    self.assertOutput(result, stats=0, other_device=-1, null_out=-1, regions=regions,
                                      allocs=allocations + 1, frees=allocations, bytes_in_use=MIB,
                                      bytes_limit=limit_of(0.75, SIM_TOTAL),
                                      bytes_reserved=limit_of(0.75, SIM_TOTAL),
                                      driver_allocs=arena_driver_allocations(result.device(0)),
                                      peak_bytes_reserved=limit_of(0.75, SIM_TOTAL))
                    self.assertEqual(result.device(0)["vmm"]["creates"] > 0, not source, result.describe())

    def test_gpumem_get_stats_in_platform_mode_counts_what_the_driver_holds(self):
        # Every request reaches the driver; at the call the 1 MiB block is what the program holds.
        for name in RUNTIME_PROGRAMS:
            with self.subTest(program=name):
                result = self.scenario(name, "stats", 1000, env={"GPUMEM_MODE": "platform"})
                allocations = int(values(result)["allocations"])
                self.assertOutput(result, stats=0, allocs=allocations + 1, frees=allocations,
                                  driver_allocs=allocations + 1, bytes_in_use=MIB, bytes_reserved=MIB,
                                  regions=0)
                # Bytes as asked for; the driver's own figure includes its rounding of each block.
                peak, driver_peak = int(values(result)["peak_bytes_reserved"]), result.device(0)["peak_bytes_reserved"]
                self.assertLessEqual(peak, driver_peak, result.describe())
                self.assertGreaterEqual(peak, 0.99 * driver_peak, result.describe())

    def test_the_api_is_absent_without_the_shim(self):
        self.assertOutput(self.scenario(RUNTIME_SHARED, "stats", 10, preload=False), stats="absent")


class Pools(MemTestCase):
    def test_default_pool_is_served_by_the_arena_and_own_pools_by_the_driver(self):
        result = self.scenario(DRIVER, "pools", env={"GPUMEM_PREALLOCATE": "0"})
        self.assertOutput(result, own_pool_data_ok=1)
        device = result.device(0)
        self.assertGreater(arena_driver_allocations(device), 0, result.describe())  # the arena's
        self.assertEqual(device["pool"]["async_allocs"], 1)   # only the program's own pool

    def test_own_pools_share_the_budget_with_a_preallocated_arena(self):
        # The arena preallocated the whole limit, its block lives in the head: the wholly free rest
        # goes back to the driver so that the program's own pool gets its memory within the budget.
        result = self.scenario(DRIVER, "pools", env=CLASSIC)
        self.assertOutput(result, own_pool_data_ok=1)
        device = result.device(0)
        self.assertEqual(device["driver_allocs"], 2)         # head and rest
        self.assertEqual(device["driver_frees"], 1)          # the rest, given back
        self.assertEqual(device["pool"]["async_allocs"], 1)  # only the program's own pool

    def test_own_pools_are_refused_when_a_single_region_holds_blocks(self):
        # Below 64 MiB the limit is one region (no head); a block lives in it, so nothing can go
        # back and the pool's request would pass the cap.
        result = self.scenario(DRIVER, "pools", env={**CLASSIC, "GPUMEM_LIMIT": "48MiB"}, expect_ok=False)
        self.assertEqual(result.returncode, 3, result.describe())
        self.assertIn("cuMemAllocFromPoolAsync of 1048576 bytes refused: over this process's budget",
                      result.stderr)

    def test_idle_granules_of_virtual_memory_go_back_for_own_pools(self):
        # The same 48 MiB limit with the default region source: the arena's idle granules go back to
        # the driver, so the program's own pool gets its memory within the budget.
        for limit in ("48MiB", "64MiB"):
            with self.subTest(limit=limit):
                result = self.scenario(DRIVER, "pools", env={"GPUMEM_LIMIT": limit})
                self.assertOutput(result, own_pool_data_ok=1)
                device = result.device(0)
                self.assertGreater(device["vmm"]["releases"], 0, result.describe())
                self.assertEqual(device["pool"]["async_allocs"], 1, result.describe())
                self.assertLessEqual(device["peak_bytes_reserved"], {"48MiB": 48, "64MiB": 64}[limit] * MIB)

    def test_default_pool_through_the_entry_point_the_build_asks_for(self):
        # The per-thread build gets cuMemAllocFromPoolAsync_ptsz from cuGetProcAddress_v2.
        for name, entry in ((RUNTIME_SHARED, "cuMemAllocFromPoolAsync"),
                            (RUNTIME_PER_THREAD, "cuMemAllocFromPoolAsync_ptsz")):
            with self.subTest(program=name):
                result = self.scenario(name, "driver_pool", MIB)
                self.assertOutput(result, entry=entry, pool_data_ok=1)
                self.assertEqual(result.device(0)["pool"]["async_allocs"], 0, result.describe())  # the arena's
                plain = self.scenario(name, "driver_pool", MIB, preload=False)
                self.assertOutput(plain, entry=entry, pool_data_ok=1)
                self.assertEqual(plain.device(0)["pool"]["async_allocs"], 1, plain.describe())


class HostMemoryPerReset(MemTestCase):
    # Not in the sanitizer passes (suite 'sanitized', 'concurrency'): their allocators keep memory of
    # their own, which this measures too.
    def test_host_memory_per_reset_stays_small(self):
        # Each reset retires the context's manager; what it keeps of host memory (its tables shrink
        # to their initial size with it) must stay small: peak RSS after 1,050 resets minus after 50.
        def max_rss_kib(rounds, env):
            full_env = lib.clean_environment()
            full_env.update(LD_LIBRARY_PATH=lib.sim_dir(), LD_PRELOAD=lib.shim_path(), **env)
            proc = subprocess.Popen([program(RUNTIME_SHARED), "reset_leaks", str(rounds), str(MIB)], env=full_env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            self.assertEqual(proc.returncode, 0)
            return usage.ru_maxrss
        for env in ({}, {"GPUMEM_MODE": "cuda_async"}, {"GPUMEM_MODE": "platform"}):
            with self.subTest(env=env):
                per_reset = (max_rss_kib(1050, env) - max_rss_kib(50, env)) / 1000
                self.assertLess(per_reset, 16, f"{per_reset:.1f} KiB of host memory per reset")


class VmmSource(MemTestCase):
    """GPUMEM_REGION_SOURCE=vmm (or auto, on the simulator, which supports virtual memory management):
    one reserved range of twice the limit, memory mapped under it in pieces: the first reservation
    from 2 MiB doubling up to a 32nd of the limit, growth one 2 MiB granule per piece."""

    def test_preallocation_maps_the_whole_limit_in_one_range(self):
        for name in (RUNTIME_SHARED, DRIVER):
            with self.subTest(program=name):
                result = self.scenario(name, "churn", 3000, env={"GPUMEM_REGION_SOURCE": "vmm"})
                device = result.device(0)
                self.assertEqual(device["driver_allocs"], 0, result.describe())  # no cuMemAlloc region
                self.assertEqual(device["vmm"]["peak_bytes"], LIMIT, result.describe())
                # 12 GiB: 2, 2, 4, ... 256 MiB, then pieces of 384 MiB (a 32nd of the limit).
                pieces = 40
                self.assertEqual(device["vmm"]["maps"], pieces, result.describe())
                self.assertEqual(device["vmm"]["creates"], pieces, result.describe())
                if name == DRIVER:  # it destroys its context: the mappings and the range go with it
                    self.assertEqual((device["vmm"]["unmaps"], device["vmm"]["releases"]), (pieces, pieces))
                    self.assertEqual((device["vmm"]["bytes"], device["vmm"]["reserved_va_bytes"]), (0, 0))
                else:
                    self.assertEqual(device["vmm"]["reserved_va_bytes"], 2 * LIMIT)
                self.assertEqual(gpumem_lines(result), [], result.describe())

    def test_preallocating_192_gib_maps_it_in_a_bounded_number_of_pieces(self):
        # At most 64 map calls for any limit up to 192 GiB: 44 for 192 GiB at 2 MiB granules, then
        # nothing more while the blocks come and go; and the whole limit is the arena's.
        for limit, pieces in ((192 * GIB, 44), (126 * MIB, 63), (GIB, 36)):
            with self.subTest(limit=limit):
                result = self.scenario(RUNTIME_SHARED, "hold", 40, MIB, 3,
                                       env={"GPUMEM_REGION_SOURCE": "vmm", "GPUMEM_LIMIT": str(limit),
                                            "CUDASIM_DEVICE_MEMORY": "256GiB"})
                device = result.device(0)
                self.assertEqual(device["driver_allocs"], 0, result.describe())
                self.assertEqual((device["vmm"]["maps"], device["vmm"]["creates"]), (pieces, pieces), result.describe())
                self.assertLessEqual(device["vmm"]["maps"], 64)
                self.assertEqual(device["vmm"]["peak_bytes"], limit, result.describe())
                self.assertEqual(gpumem_lines(result), [], result.describe())

    def test_growth_maps_only_what_is_missing(self):
        for env in ({"GPUMEM_REGION_SOURCE": "vmm", "GPUMEM_PREALLOCATE": "0"},
                    {"GPUMEM_REGION_SOURCE": "auto", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}):
            with self.subTest(env=env):
                result = self.scenario(RUNTIME_SHARED, "hold", 40, MIB, env=env)
                device = result.device(0)
                # 40 x 1 MiB held at once: five steps of the 8 MiB floor, in one address range: the
                # first reservation as pieces of 2, 2 and 4 MiB, each growth step as four 2 MiB pieces.
                self.assertEqual(device["driver_allocs"], 0, result.describe())
                self.assertEqual(device["vmm"]["maps"], 19, result.describe())
                self.assertEqual(device["vmm"]["peak_bytes"], 40 * MIB)
                self.assertEqual(device["peak_bytes_reserved"], 40 * MIB)

    def test_a_limit_between_granules_maps_whole_granules_without_a_warning(self):
        result = self.scenario(RUNTIME_SHARED, "churn", 500, env={"GPUMEM_REGION_SOURCE": "vmm", "GPUMEM_LIMIT": "1000MB"})
        device = result.device(0)
        self.assertEqual(device["vmm"]["peak_bytes"], 1000 * 1000 * 1000 // (2 * MIB) * (2 * MIB), result.describe())
        self.assertEqual(gpumem_lines(result), [], result.describe())

    def test_stream_ordered_frees_and_address_ranges_work_on_vmm_blocks(self):
        for name in RUNTIME_PROGRAMS:
            with self.subTest(program=name):
                result = self.scenario(name, "async_streams", MIB, env={"GPUMEM_REGION_SOURCE": "vmm"})
                self.assertOutput(result, cross_stream_intact=1, sync_after_async_intact=1)
                self.assertEqual(result.device(0)["driver_allocs"], 0, result.describe())
        # The address range of a block is the block itself (1 MiB), not the mappings under it.
        result = self.scenario(DRIVER, "ipc", env={"GPUMEM_REGION_SOURCE": "vmm"})
        self.assertEqual(values(result)["range_base_is_second"], "1", result.describe())
        self.assertEqual(int(values(result)["range_size"]), MIB, result.describe())

    def test_a_limit_below_one_granule_keeps_classic_regions(self):
        result = self.scenario(RUNTIME_SHARED, "same_stream", MIB, env={"GPUMEM_REGION_SOURCE": "vmm",
                                                                      "GPUMEM_LIMIT": "1MiB"})
        self.assertOutput(result, same_stream_reuse=1, intact=1)
        self.assertEqual(result.device(0)["vmm"]["maps"], 0, result.describe())

    def test_idle_granules_are_unmapped_and_mapped_again_under_a_block(self):
        # Growth: B's hole is unmapped by the trim; D lands in it and has it mapped again; the data of
        # every block stays. Preallocated: the trim unmaps every idle granule (the limit's) likewise.
        for env in ({"GPUMEM_REGION_SOURCE": "vmm", "GPUMEM_PREALLOCATE": "0"},
                    {"GPUMEM_REGION_SOURCE": "vmm"}):
            with self.subTest(env=env):
                result = self.scenario(RUNTIME_SHARED, "vmm_holes", 4 * MIB, env=env)
                self.assertOutput(result, reused_hole=1, intact=1)
                vmm = result.device(0)["vmm"]
                self.assertGreaterEqual(int(values(result)["trimmed"]), 4 * MIB, result.describe())
                self.assertGreater(vmm["unmaps"], 0, result.describe())
                self.assertEqual(gpumem_lines(result), [], result.describe())
        # The same program without gpumem, and with classic regions: the data stays too.
        for env, preload in (({}, False), ({"GPUMEM_PREALLOCATE": "0"}, True)):
            with self.subTest(env=env, preload=preload):
                result = self.scenario(RUNTIME_SHARED, "vmm_holes", 4 * MIB, env=env, preload=preload)
                self.assertOutput(result, intact=1)

    def test_growth_unmaps_idle_granules_so_reserved_follows_the_live_blocks(self):
        # 40 blocks of 1 MiB held and freed, 3 rounds: the later rounds reuse the memory the first
        # mapped (19 pieces, as above); nothing is unmapped and mapped again once the arena settles.
        env = {"GPUMEM_REGION_SOURCE": "vmm", "GPUMEM_PREALLOCATE": "0"}
        result = self.scenario(RUNTIME_SHARED, "hold", 40, MIB, 3, env=env)
        device = result.device(0)
        self.assertEqual(device["vmm"]["maps"], 19, result.describe())
        self.assertEqual(device["peak_bytes_reserved"], 40 * MIB, result.describe())

    def test_auto_is_the_default_and_classic_stays_selectable(self):
        # The simulator supports virtual memory management: the default (auto) maps it.
        for env in ({"GPUMEM_PREALLOCATE": "0"}, {"GPUMEM_PREALLOCATE": "0", "GPUMEM_REGION_SOURCE": "auto"}):
            with self.subTest(env=env):
                result = self.scenario(RUNTIME_SHARED, "hold", 3, MIB, env=env)
                self.assertEqual(result.device(0)["driver_allocs"], 0, result.describe())
                self.assertGreater(result.device(0)["vmm"]["maps"], 0, result.describe())
        result = self.scenario(RUNTIME_SHARED, "hold", 3, MIB, env={"GPUMEM_PREALLOCATE": "0", **CLASSIC})
        self.assertEqual(result.device(0)["driver_allocs"], 1, result.describe())
        self.assertEqual(result.device(0)["vmm"]["maps"], 0, result.describe())

    def test_auto_is_resolved_per_device(self):
        # Two devices, virtual memory management on device 0 only: auto maps it on device 0 and takes
        # classic regions on device 1, saying so in one info line.
        for visible, vmm in (("0", True), ("1", False)):
            with self.subTest(device=visible):
                result = self.scenario(RUNTIME_SHARED, "hold", 3, MIB,
                                       env={"GPUMEM_REGION_SOURCE": "auto", "CUDASIM_DEVICES": "2", "CUDASIM_VMM": "0",
                                            "CUDA_VISIBLE_DEVICES": visible, "GPUMEM_LOG_LEVEL": "info"})
                device = result.device(0)
                self.assertEqual(device["driver_allocs"] == 0, vmm, result.describe())
                self.assertEqual(device["vmm"]["maps"] > 0, vmm, result.describe())
                said = [line for line in gpumem_lines(result) if "virtual memory management" in line]
                self.assertEqual(len(said), 0 if vmm else 1, result.describe())
                if not vmm:
                    self.assertIn("[info]", said[0], result.describe())
                    self.assertIn("GPUMEM_REGION_SOURCE=auto", said[0], result.describe())
        # Named vmm on a device without it: a warning, and classic regions all the same.
        result = self.scenario(RUNTIME_SHARED, "hold", 3, MIB, env={"GPUMEM_REGION_SOURCE": "vmm", "CUDASIM_VMM": "none"})
        self.assertGreater(result.device(0)["driver_allocs"], 0, result.describe())
        warned = [line for line in gpumem_lines(result) if "[warning]" in line and "virtual memory" in line]
        self.assertEqual(len(warned), 1, result.describe())


if __name__ == "__main__":
    unittest.main()
