"""Never reuse memory the GPU may still be using, checked by data.

The scenario frees a block while a copy queued behind a 200 ms host function on a non-blocking
stream will still write it, then allocates a block of the same size and fills it synchronously. The
program's data survives only if the freed block was not handed out again before the copy ended.

- defer (default): the freed block is fenced until a context synchronisation began after the free;
  with room elsewhere the arena hands out other memory, and when only the fenced block fits the shim
  synchronises the context once (waiting for the copy) before reusing it.
- sync: every free synchronises the context, as cuMemFree itself does.
- none: immediate reuse, XLA's single-stream behaviour: the late copy overwrites the new owner's data.
  This is the documented price of that mode.
"""

import unittest

from test_mem_common import (DRIVER, MIB, RUNTIME_PER_THREAD, RUNTIME_PROGRAMS, RUNTIME_SHARED, MemTestCase,
                              values)


# The same scenario through the runtime (shared and static) and through the driver API.
ALL_PROGRAMS = (*RUNTIME_PROGRAMS, DRIVER)


class DeferredFreeByData(MemTestCase):
    def test_defer_keeps_data_intact(self):
        for name in ALL_PROGRAMS:
            with self.subTest(program=name):
                result = self.scenario(name, "deferred_free", MIB)
                self.assertOutput(result, reused=0, intact=1)

    def test_defer_synchronises_once_when_only_the_fenced_block_fits(self):
        # The arena is exactly one block: the second allocation can only be the freed one.
        for name in (RUNTIME_SHARED, DRIVER):
            with self.subTest(program=name):
                result = self.scenario(name, "deferred_free", MIB, env={"GPUMEM_LIMIT": "1MiB"})
                self.assertOutput(result, reused=1, intact=1)

    def test_sync_keeps_data_intact(self):
        for name in (RUNTIME_SHARED, DRIVER):
            for limit in ("1MiB", "1GiB"):
                with self.subTest(program=name, limit=limit):
                    result = self.scenario(name, "deferred_free", MIB,
                                           env={"GPUMEM_FREE_SYNC": "sync", "GPUMEM_LIMIT": limit})
                    self.assertOutput(result, intact=1)

    def test_none_reuses_at_once_and_the_late_copy_overwrites(self):
        for name in (RUNTIME_SHARED, DRIVER):
            with self.subTest(program=name):
                result = self.scenario(name, "deferred_free", MIB, env={"GPUMEM_FREE_SYNC": "none"})
                self.assertOutput(result, reused=1, intact=0)

    def test_without_the_shim_and_in_platform_mode_the_driver_waits(self):
        for name in (RUNTIME_SHARED, DRIVER):
            with self.subTest(program=name):
                plain = self.scenario(name, "deferred_free", MIB, preload=False)
                self.assertOutput(plain, intact=1)
                platform = self.scenario(name, "deferred_free", MIB, env={"GPUMEM_MODE": "platform"})
                self.assertOutput(platform, intact=1)

    def test_cuda_async_mode_follows_the_same_rules(self):
        for name in (RUNTIME_SHARED, DRIVER):
            for free_sync in ("defer", "sync"):
                with self.subTest(program=name, free_sync=free_sync):
                    result = self.scenario(name, "deferred_free", MIB,
                                           env={"GPUMEM_MODE": "cuda_async", "GPUMEM_FREE_SYNC": free_sync})
                    self.assertOutput(result, intact=1)

    def test_a_free_from_another_context_waits_for_the_blocks_own_context(self):
        # The block's context is not current at the free. Drivers before 13.0 have no
        # cuCtxSynchronize_v2: the shim must make the block's context current to synchronise it, not
        # wait for the current one. CUDASIM_DRIVER_VERSION makes the simulator such a driver (its
        # cuGetProcAddress then answers no entry point newer than 12.8).
        for version in ("13000", "12080"):
            for mode in ("bfc", "cuda_async"):
                for free_sync in ("sync", "defer"):
                    with self.subTest(driver=version, mode=mode, free_sync=free_sync):
                        result = self.scenario(DRIVER, "foreign_context_free", MIB, env={
                            "CUDASIM_DRIVER_VERSION": version, "GPUMEM_MODE": mode,
                            "GPUMEM_FREE_SYNC": free_sync, "GPUMEM_LIMIT": "1MiB"})
                        self.assertOutput(result, driver_version=version, intact=1)


# Every mode, and without gpumem (None), for the teardown tests.
TEARDOWN_MODES = {"without gpumem": None, "bfc": {}, "bfc growth": {"GPUMEM_PREALLOCATE": "false"},
                  "bfc classic": {"GPUMEM_REGION_SOURCE": "classic"}, "cuda_async": {"GPUMEM_MODE": "cuda_async"},
                  "cuda_async growth": {"GPUMEM_MODE": "cuda_async", "GPUMEM_PREALLOCATE": "false"},
                  "platform": {"GPUMEM_MODE": "platform"}}


class TeardownWaits(MemTestCase):
    def test_destroy_and_reset_wait_for_work_still_reading_the_contexts_memory(self):
        # cuCtxDestroy and cuDevicePrimaryCtxReset wait for the context's queued work before freeing
        # its memory; the shim frees its arena or pool first, so it waits as long. A copy queued
        # behind a 200 ms host function reads a block of the context torn down meanwhile: it must read
        # the block's bytes (cuda_async mode faulted: its pool was trimmed and destroyed under the copy).
        for scenario in ("destroy_with_work_queued", "reset_with_work_queued"):
            for mode, env in TEARDOWN_MODES.items():
                with self.subTest(scenario=scenario, mode=mode):
                    result = self.scenario(DRIVER, scenario, MIB, env=env, preload=env is not None)
                    self.assertOutput(result, teardown_copy_ok=1, after_teardown_ok=1)

    def test_a_reset_whose_primary_context_cannot_be_named_waits_and_forgets_the_devices_arenas(self):
        # cuDevicePrimaryCtxGetState failing at every call: the shim cannot tell which context the
        # reset tears down, so it gives back the arena or pool of every context of the device, each
        # once its queued work is done. The copy queued behind the 200 ms host function must still
        # read the block's bytes (cuda_async faulted when that fallback freed the pool without
        # waiting), and the device must work afterwards (an arena kept across the reset, as the shim
        # kept it when the query failed, handed out memory the reset freed).
        for mode, env in TEARDOWN_MODES.items():
            with self.subTest(mode=mode):
                faults = {"CUDASIM_FAULTS": "cuDevicePrimaryCtxGetState@1+=201"}  # CUDA_ERROR_INVALID_CONTEXT
                result = self.scenario(DRIVER, "reset_with_work_queued", MIB, env={**(env or {}), **faults},
                                       preload=env is not None)
                self.assertOutput(result, teardown_copy_ok=1, after_teardown_ok=1)


class ContextSynchronisation(MemTestCase):
    def test_defer_synchronises_once_per_needed_reuse(self):
        # One-block arena, 20 alloc/free rounds: each reuse needs one synchronisation by the shim.
        result = self.scenario(DRIVER, "sync_rounds", 20, 0, env={"GPUMEM_LIMIT": "1MiB"})
        self.assertEqual(result.device(0)["context_syncs"], 19, result.describe())

    def test_the_programs_own_synchronisation_releases_fenced_blocks(self):
        result = self.scenario(DRIVER, "sync_rounds", 20, 1, env={"GPUMEM_LIMIT": "1MiB"})
        self.assertEqual(result.device(0)["context_syncs"], 20, result.describe())  # only the program's

    def test_the_programs_cuCtxSynchronize_v2_releases_fenced_blocks(self):
        result = self.scenario(DRIVER, "sync_rounds", 20, 2, env={"GPUMEM_LIMIT": "1MiB"})
        self.assertOutput(result, rounds=20)
        self.assertEqual(result.device(0)["context_syncs"], 20, result.describe())

    def test_sync_mode_synchronises_on_every_free(self):
        result = self.scenario(DRIVER, "sync_rounds", 20, 0, env={"GPUMEM_FREE_SYNC": "sync"})
        self.assertEqual(result.device(0)["context_syncs"], 20, result.describe())

    def test_none_mode_never_synchronises(self):
        result = self.scenario(DRIVER, "sync_rounds", 20, 0,
                               env={"GPUMEM_FREE_SYNC": "none", "GPUMEM_LIMIT": "1MiB"})
        self.assertEqual(result.device(0)["context_syncs"], 0, result.describe())


class StreamOrderedFrees(MemTestCase):
    def test_other_streams_and_synchronous_allocations_wait_for_the_free(self):
        for name in RUNTIME_PROGRAMS:
            for env in ({}, {"GPUMEM_LIMIT": "1MiB"}):
                with self.subTest(program=name, env=env):
                    result = self.scenario(name, "async_streams", MIB, env=env)
                    self.assertOutput(result, cross_stream_intact=1, sync_after_async_intact=1)
                    self.assertEqual(result.device(0)["pool"]["async_allocs"], 0)  # served by the arena

    def test_same_stream_reuses_at_once_even_behind_slow_work(self):
        # One-block arena; the block is freed on stream A behind a 200 ms host function and asked
        # for again on A: handed out at once, with no synchronisation (work on A stays ordered).
        for name in RUNTIME_PROGRAMS:
            with self.subTest(program=name):
                result = self.scenario(name, "same_stream", MIB, env={"GPUMEM_LIMIT": "1MiB"})
                self.assertOutput(result, same_stream_reuse=1, intact=1)
                self.assertEqual(result.device(0)["context_syncs"], 0, result.describe())

    def test_legacy_default_stream_is_one_stream_for_all_threads(self):
        # A worker thread frees on stream 0 behind slow work; the main thread's stream 0 is the same
        # legacy stream, so the block is reused at once (only the program's own sync is counted).
        result = self.scenario(RUNTIME_SHARED, "default_streams", MIB, env={"GPUMEM_LIMIT": "1MiB"})
        self.assertOutput(result, reused=1, intact=1)
        self.assertEqual(result.device(0)["context_syncs"], 1, result.describe())

    def test_per_thread_default_streams_are_separate_streams(self):
        # Built for per-thread default streams: the main thread's stream 0 is not the worker's, so
        # the shim waits (one synchronisation) before reusing the only block.
        result = self.scenario(RUNTIME_PER_THREAD, "default_streams", MIB, env={"GPUMEM_LIMIT": "1MiB"})
        self.assertOutput(result, reused=1, intact=1)
        self.assertEqual(result.device(0)["context_syncs"], 2, result.describe())
        roomy = self.scenario(RUNTIME_PER_THREAD, "default_streams", MIB)
        self.assertOutput(roomy, reused=0, intact=1)

    def test_with_room_elsewhere_another_stream_gets_other_memory(self):
        result = self.scenario(RUNTIME_SHARED, "async_streams", MIB)
        self.assertOutput(result, cross_stream_reused=0)


if __name__ == "__main__":
    unittest.main()
