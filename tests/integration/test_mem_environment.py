"""Every policy variable reaches the memory managers; a bad value is one error line naming the
variable, and counts as unset: the program runs as without that variable, capped as the others say."""

import os
import re
import subprocess
import tempfile
import unittest

import gpumem_testlib as lib

from test_mem_common import (CLASSIC, DRIVER, GIB, MIB, RUNTIME_PROGRAMS, RUNTIME_SHARED, SIM_TOTAL, MemTestCase,
                             gpumem_lines, head_of, limit_of, preallocated_regions, program, values)

GRANULE = 2 * MIB  # the simulator's VMM granularity

BAD_ENVIRONMENTS = [
    ({"GPUMEM_MODE": "turbo"}, "GPUMEM_MODE"),
    ({"XLA_PYTHON_CLIENT_ALLOCATOR": "fancy"}, "XLA_PYTHON_CLIENT_ALLOCATOR"),
    ({"TF_GPU_ALLOCATOR": "bfc_please"}, "TF_GPU_ALLOCATOR"),
    ({"GPUMEM_PREALLOCATE": "maybe"}, "GPUMEM_PREALLOCATE"),
    ({"XLA_PYTHON_CLIENT_PREALLOCATE": "sometimes"}, "XLA_PYTHON_CLIENT_PREALLOCATE"),
    ({"TF_FORCE_GPU_ALLOW_GROWTH": "2"}, "TF_FORCE_GPU_ALLOW_GROWTH"),
    ({"GPUMEM_LIMIT": "lots"}, "GPUMEM_LIMIT"),
    ({"GPUMEM_LIMIT": "255"}, "GPUMEM_LIMIT"),  # less than one 256-byte granule
    ({"GPUMEM_MEM_FRACTION": "0"}, "GPUMEM_MEM_FRACTION"),
    ({"XLA_CLIENT_MEM_FRACTION": "nan"}, "XLA_CLIENT_MEM_FRACTION"),
    ({"XLA_PYTHON_CLIENT_MEM_FRACTION": "1.5"}, "XLA_PYTHON_CLIENT_MEM_FRACTION"),
    ({"GPUMEM_FRACTION_OF": "half"}, "GPUMEM_FRACTION_OF"),
    ({"GPUMEM_FREE_SYNC": "later"}, "GPUMEM_FREE_SYNC"),
    ({"GPUMEM_ASYNC_PREALLOC": "-2"}, "GPUMEM_ASYNC_PREALLOC"),
    ({"TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC": "x"}, "TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC"),
    ({"GPUMEM_LOG_LEVEL": "loud"}, "GPUMEM_LOG_LEVEL"),
    ({"XLA_CLIENT_MEM_FRACTION": "0.5", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.6"}, "MEM_FRACTION"),
]


class FrameworkAllocatorNames(MemTestCase):
    def test_a_name_gpumem_does_not_implement_maps_to_the_closest_mode_with_one_warning(self):
        result = self.scenario(RUNTIME_SHARED, "churn", 300, env={"TF_GPU_ALLOCATOR": "memory_guard"})
        warnings = [line for line in gpumem_lines(result) if "memory_guard" in line]
        self.assertEqual(len(warnings), 1, result.describe())
        self.assertIn("serves it as bfc mode", warnings[0])
        self.assertEqual(result.device(0)["bytes_reserved"], limit_of(0.75, SIM_TOTAL), result.describe())  # bfc's arena
        quiet = self.scenario(RUNTIME_SHARED, "churn", 300,
                              env={"TF_GPU_ALLOCATOR": "memory_guard", "GPUMEM_LOG_LEVEL": "error"})
        self.assertEqual(gpumem_lines(quiet), [], quiet.describe())


class BadEnvironment(MemTestCase):
    def test_a_bad_value_counts_as_unset(self):
        # The run is the one without the bad variable (for two XLA fractions that disagree, the one with
        # the lower alone), under gpumem, with one line naming the variable and what applies instead.
        for name in RUNTIME_PROGRAMS + (DRIVER,):
            for env, variable in BAD_ENVIRONMENTS:
                with self.subTest(program=name, env=env):
                    unset = {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"} if variable == "MEM_FRACTION" else {}
                    self.check_as_unset(name, env, variable, self.scenario(name, "churn", 300, env=unset))

    def check_as_unset(self, name, env, variable, unset):
        result = self.scenario(name, "churn", 300, env=env)
        self.assertEqual(result.stdout, unset.stdout)
        for figure in ("driver_allocs", "peak_bytes_reserved"):
            self.assertEqual(result.device(0)[figure], unset.device(0)[figure], f"{figure}\n{result.describe()}")
        self.assertEqual(result.device(0)["vmm"], unset.device(0)["vmm"], result.describe())
        lines = gpumem_lines(result)
        self.assertEqual(len(lines), 1, result.describe())
        self.assertIn(variable, lines[0])
        self.assertRegex(lines[0], r"; (ignored|the lower applies): ", result.describe())
        self.assertEqual(len(lib.start_lines(result.stderr)), 1, result.describe())


def policy_variables() -> list:
    """Every variable the policy reads, as its sources spell them (shim/policy/*.cpp): its own, the
    frameworks', the launchers' and the clusters' (HAMi's per-device name for device 0; torchrun's RANK, which the pattern misses)."""
    folder = os.path.join(lib.source_root(), "shim", "policy")
    names = set()
    for file in sorted(os.listdir(folder)):
        if file.endswith(".cpp"):
            with open(os.path.join(folder, file), encoding="utf-8") as f:
                names |= set(re.findall(r'"([A-Z][A-Z0-9]*_[A-Z0-9_]+)"', f.read()))
    return sorted(names | {"RANK", "CUDA_DEVICE_MEMORY_LIMIT_0"})


class ScopedErrors(MemTestCase):
    """An invalid value never lifts a cap another variable sets: a stray variable beside GPUMEM_LIMIT
    (or the wrapper's --limit) leaves the program capped there, for every variable the policy reads."""

    BLOCK = 256 * MIB  # examples/oom allocates blocks of this size until refused

    def oom(self, argv_before, env, cwd):
        result = lib.run([*argv_before, os.path.join(lib.build_root(), "examples", "oom")], env=env, cwd=cwd, timeout=60)
        got = re.search(r"got (\d+) blocks", result.stdout)
        return result, (int(got.group(1)) if got else None)

    def test_a_stray_local_rank_keeps_the_wrappers_limit(self):
        # LOCAL_RANK=abc gpumem-run --sim --limit 1GiB -- ./app: 1 GiB, not the whole device.
        wrapper = os.path.join(lib.build_root(), "scripts", "gpumem-run")
        with tempfile.TemporaryDirectory() as cwd:
            result, blocks = self.oom([wrapper, "--sim", "--limit", "1GiB", "--"], {"LOCAL_RANK": "abc"}, cwd)
        self.assertSucceeded(result)
        self.assertEqual(blocks, GIB // self.BLOCK, result.describe())
        self.assertIn('gpumem: LOCAL_RANK="abc" is not a rank (a decimal number, 0 or more); ignored: the launcher\'s '
                      'local rank is unknown', result.stderr)

    def test_every_variable_with_a_bad_value_keeps_the_cap(self):
        variables = policy_variables()
        self.assertGreaterEqual(len(variables), 40, variables)
        capped = GIB // self.BLOCK
        with tempfile.TemporaryDirectory() as cwd:
            for variable in variables:
                with self.subTest(variable=variable):
                    if variable == "GPUMEM_LIMIT":
                        # A bad cap itself: the default fraction, 0.75 of the 16 GiB device, caps instead.
                        env, expected = {variable: "abc!"}, limit_of(0.75, SIM_TOTAL) // self.BLOCK
                    else:
                        env, expected = {"GPUMEM_LIMIT": "1GiB", variable: "abc!"}, capped
                    result, blocks = self.oom([], env, cwd)
                    # The policy's error lines (untagged; the refusal at the cap is a tagged warning).
                    problems = [line for line in gpumem_lines(result) if not line.startswith("gpumem: [")]
                    self.assertSucceeded(result)
                    self.assertEqual(blocks, expected, result.describe())
                    # One line for the bad variable, if the policy reads it at all here (a launcher's
                    # variables are read only when that launcher is recognised; paths take any text).
                    self.assertLessEqual(len(problems), 1, result.describe())
                    for line in problems:
                        self.assertTrue(line.startswith(f'gpumem: {variable}="abc!" is '), result.describe())


class LimitBelowOneGranule(MemTestCase):
    def test_a_fraction_that_leaves_less_than_a_granule_leaves_the_device_unmanaged_with_one_error(self):
        # 1e-9 of the 16 GiB simulated device is 17 bytes: no pool that could serve anything.
        for name in RUNTIME_PROGRAMS + (DRIVER,):
            with self.subTest(program=name):
                plain = self.scenario(name, "churn", 300, preload=False)
                result = self.scenario(name, "churn", 300, env={"XLA_PYTHON_CLIENT_MEM_FRACTION": "1e-9"})
                self.assertEqual(result.stdout, plain.stdout)
                self.assertEqual(result.device(0)["driver_allocs"], plain.device(0)["driver_allocs"],
                                 result.describe())
                lines = gpumem_lines(result)
                self.assertEqual(len(lines), 1, result.describe())
                self.assertIn("XLA_PYTHON_CLIENT_MEM_FRACTION=1e-09 gives 0 bytes of device 0", lines[0])
                self.assertIn("less than one 256-byte granule", lines[0])


class StrictEnvironment(MemTestCase):
    """GPUMEM_STRICT=1: a bad configuration fails the program at its first CUDA call, with the one
    error line, instead of letting it run without gpumem; a good one changes nothing."""

    def test_a_bad_value_fails_the_program(self):
        for name in RUNTIME_PROGRAMS + (DRIVER,):
            with self.subTest(program=name):
                result = self.scenario(name, "churn", 300, env={"GPUMEM_STRICT": "1", "GPUMEM_MODE": "bcf"},
                                       expect_ok=False)
                self.assertNotEqual(result.returncode, 0, result.describe())
                lines = gpumem_lines(result)
                self.assertEqual(len(lines), 1, result.describe())
                self.assertIn("GPUMEM_MODE", lines[0])
                self.assertIn("GPUMEM_STRICT is set: every CUDA call fails", lines[0])

    def test_a_good_configuration_is_unchanged(self):
        loose = self.scenario(RUNTIME_SHARED, "churn", 300)
        strict = self.scenario(RUNTIME_SHARED, "churn", 300, env={"GPUMEM_STRICT": "1"})
        self.assertSucceeded(strict)
        self.assertEqual(strict.stdout, loose.stdout)
        self.assertEqual(strict.device(0)["driver_allocs"], loose.device(0)["driver_allocs"], strict.describe())


class HostileValues(MemTestCase):
    """Every variable the policy reads, with values nobody should set: the program runs exactly as
    without the shim or under a valid policy, never crashes, and gpumem says at most one line per
    problem, each with its prefix."""

    VALUES = ["", " ", "\t", "\n", "99999999999999999999999999999", "-1", "-0", "0", "nan", "NaN", "inf",
              "-inf", "1e309", "1e-320", "0x10", "12", "12 GiB", "1,5", "\u0661\u0662", "\u00e9t\u00e9",
              "\udcff\udcfe", "a" * 5000, "on\u0000", "%p%p%n%s"]

    def variables(self):
        with open(os.path.join(lib.source_root(), "shim", "policy", "policy.cpp"), encoding="utf-8") as f:
            return sorted(set(re.findall(r'"((?:GPUMEM|XLA|TF)_[A-Z_]+)"', f.read())))

    def test_every_variable_with_every_hostile_value(self):
        plain = self.scenario(RUNTIME_SHARED, "churn", 200, preload=False)
        variables = self.variables()
        self.assertGreaterEqual(len(variables), 18)
        tried = 0
        with tempfile.TemporaryDirectory(prefix="gpumem-hostile-") as cwd:
            for variable in variables:
                for value in self.VALUES:
                    if "\u0000" in value:
                        continue  # an environment cannot hold a NUL
                    with self.subTest(variable=variable, value=value[:40]):
                        result = lib.run([program(RUNTIME_SHARED), "churn", "200"], env={variable: value},
                                         timeout=60, cwd=cwd)
                        tried += 1
                        self.assertEqual(result.returncode, 0, result.describe())
                        self.assertEqual(result.stdout, plain.stdout, result.describe())
                        lines = lib.without_start_line(result.stderr).splitlines()
                        self.assertLessEqual(len(lines), 2, result.describe())
                        for line in result.stderr.splitlines():
                            self.assertTrue(line.startswith("gpumem: "), result.describe())
        self.assertGreater(tried, 18 * 20)


class GoodEnvironment(MemTestCase):
    def test_each_variable_takes_effect(self):
        cases = [
            ({}, 1, limit_of(0.75, SIM_TOTAL)),
            ({"GPUMEM_MODE": "bfc"}, 1, limit_of(0.75, SIM_TOTAL)),
            ({"XLA_PYTHON_CLIENT_ALLOCATOR": "default"}, 1, limit_of(0.75, SIM_TOTAL)),
            ({"XLA_PYTHON_CLIENT_ALLOCATOR": "bfc"}, 1, limit_of(0.75, SIM_TOTAL)),
            ({"GPUMEM_PREALLOCATE": "yes"}, 1, limit_of(0.75, SIM_TOTAL)),
            ({"XLA_PYTHON_CLIENT_PREALLOCATE": "true", "XLA_CLIENT_MEM_FRACTION": ".5"}, 1,
             limit_of(0.5, SIM_TOTAL)),
            ({"TF_FORCE_GPU_ALLOW_GROWTH": "false"}, 1, limit_of(0.75, SIM_TOTAL)),
            ({"GPUMEM_PREALLOCATE": "on", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}, 1, limit_of(0.75, SIM_TOTAL)),
            ({"GPUMEM_LIMIT": "512MB"}, 1, 512 * 10**6 // 256 * 256),
            ({"GPUMEM_LIMIT": "2e9"}, 1, 2 * 10**9 // 256 * 256),
            ({"GPUMEM_LIMIT": "2GiB", "GPUMEM_FREE_SYNC": "none"}, 1, 2 * GIB),
            ({"GPUMEM_FRACTION_OF": "total", "GPUMEM_MEM_FRACTION": "0.125"}, 1, 2 * GIB),
            ({"GPUMEM_GARBAGE_COLLECTION": "off"}, 1, limit_of(0.75, SIM_TOTAL)),
        ]
        for env, _, reserved in cases:
            with self.subTest(env=env):
                # Classic regions: preallocated as the head (1/32 of the limit) and the rest.
                result = self.scenario(RUNTIME_SHARED, "churn", 300, env={**CLASSIC, **env})
                self.assertEqual(result.device(0)["driver_allocs"], preallocated_regions(reserved), result.describe())
                self.assertEqual(result.device(0)["largest_alloc"], reserved - head_of(reserved), result.describe())
                self.assertEqual(gpumem_lines(result), [], result.describe())
                # The default, virtual memory: the whole granules within the limit, no cuMemAlloc.
                result = self.scenario(RUNTIME_SHARED, "churn", 300, env=env)
                device = result.device(0)
                self.assertEqual(device["driver_allocs"], 0, result.describe())
                self.assertEqual(device["vmm"]["peak_bytes"], reserved // GRANULE * GRANULE, result.describe())
                self.assertEqual(gpumem_lines(result), [], result.describe())

    def test_growth_variables(self):
        for env in ({"GPUMEM_PREALLOCATE": "off"}, {"XLA_PYTHON_CLIENT_PREALLOCATE": "0"},
                    {"TF_FORCE_GPU_ALLOW_GROWTH": "TRUE"}):
            with self.subTest(env=env):
                result = self.scenario(RUNTIME_SHARED, "hold", 3, MIB, env={**CLASSIC, **env})
                self.assertEqual(result.device(0)["driver_allocs"], 1, result.describe())  # the 8 MiB floor
                self.assertEqual(result.device(0)["peak_bytes_reserved"], 8 * MIB)
                # The default, virtual memory: the same floor, mapped, no cuMemAlloc.
                result = self.scenario(RUNTIME_SHARED, "hold", 3, MIB, env=env)
                self.assertEqual(result.device(0)["driver_allocs"], 0, result.describe())
                self.assertEqual(result.device(0)["vmm"]["peak_bytes"], 8 * MIB, result.describe())

    def test_info_level_states_the_policy_once_per_context(self):
        result = self.scenario(RUNTIME_SHARED, "two_devices",
                               env={"GPUMEM_LOG_LEVEL": "info", "CUDASIM_DEVICES": "2",
                                    "XLA_CLIENT_MEM_FRACTION": "0.5"})
        context_lines = [line for line in gpumem_lines(result)
                         if "mode" in line and "limit" in line and "summary:" not in line]
        self.assertEqual(len(context_lines), 2, result.describe())
        for line in context_lines:
            self.assertIn("XLA_CLIENT_MEM_FRACTION", line)
        # And once more when each context retires, with what it served.
        summaries = [line for line in gpumem_lines(result) if "summary:" in line]
        self.assertEqual(len(summaries), 2, result.describe())
        self.assertEqual(values(result)["device1_total"], str(limit_of(0.5, SIM_TOTAL)))


if __name__ == "__main__":
    unittest.main()
