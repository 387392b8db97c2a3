"""The shim's log: level and file from the environment, preload-safe, and the one-line report of a
bad environment on stderr (after which the shim passes everything through)."""

import os
import tempfile
import unittest

import gpumem_testlib as testlib

PROGRAM = "interpose_paths_runtime_shared"
ALLOCATIONS = 64


class LoggingTest(testlib.TestCase):
    def run_program(self, env):
        result = testlib.run([testlib.program_path(PROGRAM)], env=env)
        self.assertSucceeded(result)
        return result

    def test_default_level_is_quiet_on_success(self):
        self.assertEqual(self.run_program({}).stderr, "")

    def test_every_line_is_prefixed(self):
        result = self.run_program({"GPUMEM_LOG_LEVEL": "trace"})
        lines = result.stderr.splitlines()
        self.assertTrue(lines)
        for line in lines:
            self.assertTrue(line.startswith("gpumem: ["), line)

    def test_log_file_receives_the_messages(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "gpumem.log")
            result = self.run_program({"GPUMEM_LOG_LEVEL": "debug", "GPUMEM_LOG_FILE": path})
            self.assertEqual(result.stderr, "")
            with open(path) as log:
                lines = log.read().splitlines()
        self.assertIn('gpumem: [debug] dlsym("cuGetProcAddress_v2") -> hook in libgpumem.so', lines)

    def test_unwritable_log_file_falls_back_to_stderr(self):
        result = self.run_program({"GPUMEM_LOG_LEVEL": "debug",
                                   "GPUMEM_LOG_FILE": "/dev/null/gpumem.log"})
        lines = result.stderr.splitlines()
        self.assertTrue(lines[0].startswith('gpumem: [error] cannot open GPUMEM_LOG_FILE='
                                            '"/dev/null/gpumem.log"'), result.describe())
        self.assertIn('gpumem: [debug] dlsym("cuGetProcAddress_v2") -> hook in libgpumem.so', lines)

    def test_bad_environment_one_line_then_pass_through(self):
        cases = [
            {"GPUMEM_LOG_LEVEL": "loud"},
            {"GPUMEM_MODE": "bogus", "GPUMEM_LOG_LEVEL": "debug"},
            {"XLA_PYTHON_CLIENT_MEM_FRACTION": "1.5"},
        ]
        with tempfile.TemporaryDirectory() as tmp:
            for env in cases:
                # A log file must not swallow the report: it goes to stderr.
                env = dict(env, GPUMEM_LOG_FILE=os.path.join(tmp, "unused.log"))
                with self.subTest(env=env):
                    result = self.run_program(env)
                    lines = result.stderr.splitlines()
                    self.assertEqual(len(lines), 1, result.describe())
                    self.assertTrue(lines[0].startswith("gpumem: "), lines[0])
                    variable = next(k for k in env if k != "GPUMEM_LOG_FILE")
                    self.assertIn(variable, lines[0])
                    self.assertIn(env[variable], lines[0])
                    self.assertEqual(testlib.key_values(result.stdout)["gpumem_is_active"], "0")
                    self.assertEqual(result.device(0)["driver_allocs"], ALLOCATIONS)


if __name__ == "__main__":
    unittest.main(verbosity=2)
