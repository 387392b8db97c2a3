"""Life cycle: the CUDA runtime loaded and unloaded with dlopen/dlclose several times, with a device
reset before each unload; device memory allocated, used and freed from atexit handlers and static
destructors, through the runtime and the driver API; fork() while other threads use every allocation
path. Under the shim in every mode: the same answers as without it, no crash, no hang.

Meson runs ForkDuringAllocations as its own test, 'fork', outside the AddressSanitizer pass (why:
tests/integration/meson.build)."""

import os
import tempfile
import unittest

import gpumem_testlib as t

MODES = [{}, {"GPUMEM_PREALLOCATE": "0"}, {"GPUMEM_MODE": "platform"}, {"GPUMEM_MODE": "cuda_async"},
         {"GPUMEM_MODE": "off"}]


class DlopenCycle(unittest.TestCase):
    def test_runtime_loaded_and_unloaded_again_and_again(self):
        program = t.program_path("lifecycle")
        plain = t.run([program, "dlopen_cycle", "5"], preload=False)
        self.assertEqual(plain.returncode, 0, plain.describe())
        self.assertIn("intact=5", plain.stdout)
        for env in MODES:
            with self.subTest(env=env):
                result = t.run([program, "dlopen_cycle", "5"], env=env)
                self.assertEqual(result.returncode, 0, result.describe())
                self.assertEqual(result.stdout, plain.stdout, result.describe())
                # Nothing to warn about; the start line once per process however often the runtime
                # comes and goes (none when gpumem takes nothing over).
                self.assertEqual(t.without_start_line(result.stderr), "", result.describe())
                self.assertEqual(len(t.start_lines(result.stderr)), 0 if env.get("GPUMEM_MODE") == "off" else 1,
                                 result.describe())



class AfterMain(unittest.TestCase):
    def test_allocation_from_atexit_handlers_and_static_destructors(self):
        program = t.program_path("exit_allocations")
        plain = t.run([program, "both"], preload=False)
        self.assertEqual(plain.returncode, 0, plain.describe())
        self.assertEqual(t.key_values(plain.stdout),
                         {"main_ok": "1", "atexit_runtime_ok": "1", "atexit_driver_ok": "1",
                          "static_destructor_runtime_ok": "1", "static_destructor_driver_ok": "1"})
        for env in MODES + [{"GPUMEM_STATS": "1"}, {"GPUMEM_TRACE": "/dev/null"}]:
            for when in ("atexit", "static", "both"):
                with self.subTest(env=env, when=when):
                    expected = t.run([program, when], preload=False)
                    result = t.run([program, when], env=env)
                    self.assertEqual(result.returncode, 0, result.describe())
                    self.assertEqual(result.stdout, expected.stdout, result.describe())


class ForkDuringAllocations(unittest.TestCase):
    """Children forked while other threads hold the shim's locks on every allocation path finish and
    allocate (fork_safe_lock.h): none inherits a lock held by a thread it does not have."""

    FORKS = 40
    # Growing, so that the other paths find room in the budget beside the arena or pool.
    MODES = {
        "bfc": {},
        "bfc classic": {"GPUMEM_REGION_SOURCE": "classic"},
        "platform": {"GPUMEM_MODE": "platform"},
        "cuda_async": {"GPUMEM_MODE": "cuda_async"},
    }

    def test_children_forked_during_every_path_finish_and_allocate(self):
        program = t.program_path("fork_during_paths")
        plain = t.run([program, "3", "5"], preload=False)
        self.assertEqual(plain.returncode, 0, plain.describe())
        for name, mode in self.MODES.items():
            with self.subTest(mode=name), tempfile.TemporaryDirectory(prefix="gpumem-fork-") as tmp:
                # The trace and the log are written too, so their locks are taken on every path.
                env = {**mode, "GPUMEM_PREALLOCATE": "false", "GPUMEM_TRACE": os.path.join(tmp, "trace-%p.csv"),
                       "GPUMEM_LOG_LEVEL": "debug", "GPUMEM_LOG_FILE": os.path.join(tmp, "log")}
                result = t.run([program, "3", str(self.FORKS), "20"], env=env, timeout=300)
                self.assertEqual(t.key_values(result.stdout),
                                 {"forks": str(self.FORKS), "finished": str(self.FORKS), "failed": "0", "hung": "0"},
                                 result.describe())
                self.assertEqual(result.returncode, 0, result.describe())


if __name__ == "__main__":
    unittest.main(verbosity=2)
