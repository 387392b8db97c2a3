"""Streams being captured into a CUDA graph: stream-ordered allocations pass through to the driver.

On a capturing stream cudaMallocAsync / cuMemAllocAsync / cuMemAllocFromPoolAsync (default pool) make
memory-allocation nodes that the graph owns (the driver frees them by a captured free node or at
cudaGraphDestroy). The scenario `graph_capture` captures such allocations, a set and a free on a
non-blocking stream, ends the capture and destroys the graph; then (runtime programs) uses the
legacy stream while a blocking stream captures, which the driver refuses; then allocates as usual.
Checked against the simulator's report (`graph` counters: allocation and free nodes, bytes graphs
hold) and the shim's own figures (gpumem_get_stats, printed as `shim_*`), in every mode, with the
program's output the same as without the shim.
"""

import unittest

from test_mem_common import (DRIVER, MIB, RUNTIME_PER_THREAD, RUNTIME_SHARED, RUNTIME_STATIC, MemTestCase,
                             values)

PROGRAMS = (RUNTIME_SHARED, RUNTIME_STATIC, RUNTIME_PER_THREAD, DRIVER)
MODES = {
    "bfc preallocate": {"GPUMEM_MODE": "bfc"},
    "bfc growth": {"GPUMEM_MODE": "bfc", "GPUMEM_PREALLOCATE": "0"},
    "cuda_async": {"GPUMEM_MODE": "cuda_async"},
    "platform": {"GPUMEM_MODE": "platform"},
}


def program_view(result) -> dict:
    """What the program itself saw: its output without the shim's figures."""
    return {key: value for key, value in values(result).items() if not key.startswith("shim_")}


class GraphCapture(MemTestCase):
    def plain(self, name):
        return self.scenario(name, "graph_capture", MIB, preload=False)

    def test_without_the_shim_the_driver_makes_graph_memory(self):
        for name in PROGRAMS:
            with self.subTest(program=name):
                result = self.plain(name)
                success = "CUDA_SUCCESS" if name == DRIVER else "cudaSuccess"
                self.assertOutput(result, capturing=1, free_in_capture=success, end_capture=success, graph=1,
                                  after_data_ok=1)
                graph = result.device(0)["graph"]
                self.assertEqual((graph["allocs"], graph["frees"], graph["bytes"]), (2, 1, 0), result.describe())
                if name != DRIVER:  # a free node takes graph allocations only
                    self.assertOutput(result, free_outside_memory_in_capture="cudaErrorInvalidValue")
                if name in (RUNTIME_SHARED, RUNTIME_STATIC):  # stream 0 is the legacy stream there
                    self.assertOutput(result, legacy_alloc="cudaErrorStreamCaptureImplicit",
                                      end_blocking="cudaErrorStreamCaptureInvalidated")

    def test_allocations_under_capture_reach_the_driver_in_every_mode(self):
        for name in PROGRAMS:
            plain = self.plain(name)
            for mode, env in MODES.items():
                with self.subTest(program=name, mode=mode):
                    result = self.scenario(name, "graph_capture", MIB, env=env)
                    self.assertEqual(program_view(result), program_view(plain), result.describe())
                    # The driver made both allocation nodes, freed one by its node and the other with
                    # the graph, exactly as without the shim.
                    self.assertEqual(result.device(0)["graph"], plain.device(0)["graph"], result.describe())
                    pool_allocs = result.device(0)["pool"]["async_allocs"]
                    if mode.startswith("bfc"):
                        # The arena serves the ordinary stream-ordered requests: the pool sees none,
                        # and the arena handed out nothing during the capture.
                        self.assertEqual(pool_allocs, 0, result.describe())
                        if name != DRIVER:
                            self.assertOutput(result, shim_in_use_delta=0, shim_fenced_delta=0,
                                              shim_passed_through_delta=3)  # two allocations, one free
                    else:
                        # The captured allocations were graph nodes, not pool allocations.
                        self.assertEqual(pool_allocs, plain.device(0)["pool"]["async_allocs"], result.describe())
                    if mode == "platform" and name != DRIVER:
                        # Graph memory is the graph's: the driver frees it with the graph, unseen,
                        # so platform mode's figures leave it out. (cuda_async tracks no bytes.)
                        self.assertOutput(result, shim_in_use_delta=0)


class ShimCallsDuringCapture(MemTestCase):
    # While the program captures (relaxed mode, cudaMalloc/cudaFree allowed), the shim makes no
    # synchronisation of its own: the driver would refuse it and end the capture. Fenced memory is
    # then left alone: the arena grows, sync-mode frees defer, and a request the arena cannot serve
    # goes to the driver.
    CONFIGS = {
        "bfc, full arena": {"GPUMEM_LIMIT": "4MiB"},
        "bfc growth": {"GPUMEM_PREALLOCATE": "0"},
        "bfc free=sync": {"GPUMEM_FREE_SYNC": "sync"},
        "bfc free=sync, full arena": {"GPUMEM_FREE_SYNC": "sync", "GPUMEM_LIMIT": "4MiB"},
        "cuda_async free=sync": {"GPUMEM_MODE": "cuda_async", "GPUMEM_FREE_SYNC": "sync"},
        "platform": {"GPUMEM_MODE": "platform"},
    }

    def test_the_capture_survives_the_programs_allocations(self):
        for name in (RUNTIME_SHARED, RUNTIME_STATIC):
            plain = self.scenario(name, "capture_alloc", MIB, preload=False)
            self.assertOutput(plain, malloc_in_capture="cudaSuccess", free_in_capture="cudaSuccess",
                              end_capture="cudaSuccess", after_data_ok=1)
            for config, env in self.CONFIGS.items():
                with self.subTest(program=name, config=config):
                    result = self.scenario(name, "capture_alloc", MIB, env=env)
                    if config == "bfc, full arena":
                        # The arena holds the whole limit and may not synchronise to reuse freed
                        # memory: the request would pass the cap, so it is refused, and the capture
                        # goes on unharmed.
                        self.assertOutput(result, malloc_in_capture="cudaErrorMemoryAllocation",
                                          end_capture="cudaSuccess", after_data_ok=1)
                        self.assertIn("over this process's budget", result.stderr)
                        continue
                    self.assertEqual(values(result), values(plain), result.describe())


if __name__ == "__main__":
    unittest.main()
