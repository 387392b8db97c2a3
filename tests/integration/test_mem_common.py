"""Shared pieces of the memory-manager end-to-end tests: where the scenario programs are, how to run
one and read its `key=value` output. Holds no tests itself."""

import os

import gpumem_testlib as lib

GIB = 1 << 30
MIB = 1 << 20
# The simulator's defaults: 16 GiB per device, 300 MiB taken by each context.
SIM_TOTAL = 16 * GIB
SIM_CONTEXT_OVERHEAD = 300 * MIB


def program(name: str) -> str:
    return os.path.join(os.environ["GPUMEM_TEST_BUILD_ROOT"], "tests", "integration", "programs", name)


RUNTIME_SHARED = "mem_runtime_shared"
RUNTIME_STATIC = "mem_runtime_static"
RUNTIME_PER_THREAD = "mem_runtime_per_thread"  # built with CUDA_API_PER_THREAD_DEFAULT_STREAM
DRIVER = "mem_driver"
RUNTIME_PROGRAMS = (RUNTIME_SHARED, RUNTIME_STATIC)


def limit_of(fraction: float, basis: int) -> int:
    """What the policy documents: fraction x basis, rounded down to a multiple of 256."""
    return int(fraction * basis) // 256 * 256


def head_of(limit: int) -> int:
    """The head region of a preallocated arena (policy.h, preallocation_head_bytes): 1/32 of the
    limit in 2 MiB units, at most 1 GiB, none below a 64 MiB limit."""
    if limit < 64 * MIB:
        return 0
    return min(max(limit // 32 // (2 * MIB) * (2 * MIB), 2 * MIB), GIB)


def preallocated_regions(limit: int) -> int:
    """Driver allocations a preallocated arena makes: its head and the rest, or one region."""
    return 2 if head_of(limit) else 1


# Classic regions, named: the default region source is virtual memory wherever the driver has it (the
# simulator's devices do), so tests of classic regions' own shape ask for them.
CLASSIC = {"GPUMEM_REGION_SOURCE": "classic"}


def arena_driver_allocations(device: dict) -> int:
    """Physical allocations made of the driver, by either region source: cuMemAlloc regions (classic)
    and cuMemCreate pieces (virtual memory)."""
    return device["driver_allocs"] + device["vmm"]["creates"]


def values(result: lib.Result) -> dict:
    """The scenario's `key=value` lines."""
    parsed = {}
    for line in result.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            parsed[key.strip()] = value.strip()
    return parsed


def gpumem_lines(result: lib.Result) -> list:
    """What gpumem warned or erred about: its lines less the start line (lib.START_LINE), which every
    managed run prints once and the tests of that line check themselves."""
    return [line for line in lib.without_start_line(result.stderr).splitlines() if line.startswith("gpumem")]


class MemTestCase(lib.TestCase):
    """Runs scenario programs and checks them; `region_source` is the environment every scenario of
    the class starts from (CLASSIC for tests of classic regions), under the test's own."""

    region_source: dict = {}

    def scenario(self, name, *args, env=None, preload=True, expect_ok=True) -> lib.Result:
        env = {**self.region_source, **(env or {})}
        result = lib.run([program(name), *map(str, args)], env=env, preload=preload, timeout=60)
        if expect_ok:
            self.assertSucceeded(result)
        return result

    def assertOutput(self, result, **expected):
        got = values(result)
        for key, value in expected.items():
            self.assertEqual(got.get(key), str(value), f"{key}\n{result.describe()}")
