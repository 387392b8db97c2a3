"""The shim's log: level and file from the environment, preload-safe, the start line at the default
level, and the one-line report of each bad variable on stderr (after which that variable alone is
ignored)."""

import os
import stat
import subprocess
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

    def test_default_level_says_the_start_line_alone_on_success(self):
        result = self.run_program({})
        self.assertEqual(result.stderr, "gpumem: device 0: bfc arena, preallocated, vmm regions (auto), limit 12 GiB "
                                        "(0.75 of 16 GiB, default)\n", result.describe())
        self.assertEqual(testlib.start_lines(result.stderr), result.stderr.splitlines())

    def test_warn_and_quieter_levels_hide_the_start_line(self):
        for level in ("warn", "warning", "error", "off"):
            with self.subTest(level=level):
                self.assertEqual(self.run_program({"GPUMEM_LOG_LEVEL": level}).stderr, "")

    def test_the_start_line_names_what_applies_and_where_it_came_from(self):
        cases = [
            ({"GPUMEM_LIMIT": "1GiB", "GPUMEM_PREALLOCATE": "false"},
             "bfc arena, growing on demand, vmm regions (auto), limit 1 GiB (GPUMEM_LIMIT)"),
            ({"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5", "GPUMEM_REGION_SOURCE": "classic"},
             "bfc arena, preallocated, classic regions, limit 8 GiB (0.5 of 16 GiB, XLA_PYTHON_CLIENT_MEM_FRACTION)"),
            ({"TF_GPU_ALLOCATOR": "cuda_malloc_async"}, "cuda_async pool, limit 12 GiB (0.75 of 16 GiB, default)"),
            ({"GPUMEM_MODE": "platform", "CUDA_DEVICE_MEMORY_LIMIT": "2g"},
             "platform, every request to the driver, limit 2 GiB (CUDA_DEVICE_MEMORY_LIMIT)"),
        ]
        for env, expected in cases:
            with self.subTest(env=env):
                result = self.run_program(env)
                self.assertEqual(testlib.start_lines(result.stderr), [f"gpumem: device 0: {expected}"],
                                 result.describe())

    def test_no_start_line_when_nothing_is_taken_over(self):
        # Pass-through by choice, and a process that never reaches CUDA: nothing to say.
        self.assertEqual(self.run_program({"GPUMEM_MODE": "off"}).stderr, "")
        quiet = testlib.run(["/bin/true"])
        self.assertEqual((quiet.returncode, quiet.stderr), (0, ""))

    def test_a_limit_for_a_device_that_is_not_there_is_said_once(self):
        result = self.run_program({"GPUMEM_LIMIT": "3=1GiB"})
        self.assertEqual(testlib.without_start_line(result.stderr),
                         "gpumem: [warning] GPUMEM_LIMIT's list names device 3, but this process sees 1 device (0); "
                         "that limit applies to no device\n", result.describe())
        self.assertEqual(len(testlib.start_lines(result.stderr)), 1, result.describe())

    def test_every_line_is_prefixed(self):
        result = self.run_program({"GPUMEM_LOG_LEVEL": "trace"})
        lines = result.stderr.splitlines()
        self.assertTrue(lines)
        for line in lines:
            # A level tag on each, but the start line's (a notice: "gpumem: device 0: ...").
            self.assertTrue(line.startswith("gpumem: [") or testlib.START_LINE.match(line), line)
        self.assertEqual(len(testlib.start_lines(result.stderr)), 1, result.describe())

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
        self.assertTrue(lines[0].startswith('gpumem: [error] GPUMEM_LOG_FILE: cannot open '
                                            '"/dev/null/gpumem.log"'), result.describe())
        self.assertIn('gpumem: [debug] dlsym("cuGetProcAddress_v2") -> hook in libgpumem.so', lines)

    def test_bad_variable_one_line_then_it_alone_is_ignored(self):
        cases = [
            ("GPUMEM_LOG_LEVEL", {"GPUMEM_LOG_LEVEL": "loud"}, "the log level is notice (default)"),
            ("GPUMEM_MODE", {"GPUMEM_MODE": "bogus", "GPUMEM_LOG_LEVEL": "debug"}, "the mode is bfc (default)"),
            ("XLA_PYTHON_CLIENT_MEM_FRACTION", {"XLA_PYTHON_CLIENT_MEM_FRACTION": "1.5"},
             "the limit is 0.75 (default) of each device's total memory"),
        ]
        with tempfile.TemporaryDirectory() as tmp:
            for variable, env, fallback in cases:
                # A log file must not swallow the report: it goes to stderr (the log, to the file).
                env = dict(env, GPUMEM_LOG_FILE=os.path.join(tmp, "log.txt"))
                with self.subTest(env=env):
                    result = self.run_program(env)
                    lines = result.stderr.splitlines()
                    self.assertEqual(len(lines), 1, result.describe())
                    self.assertTrue(lines[0].startswith("gpumem: "), lines[0])
                    self.assertIn(f'{variable}="{env[variable]}"', lines[0])
                    self.assertTrue(lines[0].endswith("; ignored: " + fallback), lines[0])
                    # The rest of the configuration holds: gpumem manages the memory, its arena serves.
                    self.assertEqual(testlib.key_values(result.stdout)["gpumem_is_active"], "1")
                    self.assertLess(result.device(0)["driver_allocs"], ALLOCATIONS)

class HostileLogFiles(testlib.TestCase):
    """GPUMEM_LOG_FILE is opened without blocking, never through a symbolic link (the standard streams'
    names aside), only as a regular file or a character device, close-on-exec; the shim's writes never
    raise SIGPIPE or SIGXFSZ, and their failures are said once, in gpumem's words."""

    ENV = {"GPUMEM_LOG_LEVEL": "info"}  # every allocating run logs its policy line

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="gpumem-log-")
        self.addCleanup(self.tmp.cleanup)

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def observe(self, *args, env=None, timeout=30, fsize_limit=None):
        return testlib.run([testlib.program_path("observe_scenarios"), *args], env=dict(self.ENV, **(env or {})),
                           timeout=timeout, fsize_limit=fsize_limit)

    def assertAllPrefixed(self, result):
        for line in result.stderr.splitlines():
            self.assertTrue(line.startswith("gpumem: [") or testlib.START_LINE.match(line), result.describe())

    def test_what_is_not_a_regular_file_is_refused_at_once(self):
        target = self.path("precious.txt")
        with open(target, "w") as f:
            f.write("keep me\n")
        os.symlink(target, self.path("link.log"))
        os.mkfifo(self.path("fifo.log"))
        os.mkfifo(self.path("read.log"))
        os.mkdir(self.path("dir.log"))
        reader = os.open(self.path("read.log"), os.O_RDONLY | os.O_NONBLOCK)  # a FIFO someone reads
        self.addCleanup(os.close, reader)
        # /dev/full is a character device, so it is opened; its first write fails, and that is said.
        cases = {self.path("link.log"): "symbolic link", self.path("fifo.log"): "not a regular file",
                 self.path("read.log"): "not a regular file", self.path("dir.log"): "not a regular file",
                 "/dev/full": "No space left on device"}
        for path, reason in cases.items():
            with self.subTest(path=path):
                result = self.observe("churn", "50", env={"GPUMEM_LOG_FILE": path})
                self.assertSucceeded(result)
                self.assertAllPrefixed(result)
                refusals = [line for line in result.stderr.splitlines() if line.startswith("gpumem: [error]")]
                self.assertEqual(len(refusals), 1, result.describe())
                self.assertIn(reason, refusals[0])
                self.assertIn("[info]", result.stderr)  # the messages still reach stderr
        with open(target) as f:
            self.assertEqual(f.read(), "keep me\n")
        self.assertEqual(os.read(reader, 4096), b"")

    def test_a_failed_write_is_said_once_in_gpumem_words(self):
        # A file-size limit of 0 (its signal ignored, as the limit's owner would): every write fails.
        path = self.path("gpumem.log")
        shell = "trap '' XFSZ; ulimit -f 0; exec \"$0\" \"$@\""
        result = testlib.run(["/bin/sh", "-c", shell, testlib.program_path("observe_scenarios"), "churn", "50"],
                             env=dict(self.ENV, GPUMEM_LOG_FILE=path, CUDASIM_REPORT="/dev/null"), timeout=30)
        self.assertSucceeded(result)
        self.assertAllPrefixed(result)
        failures = [line for line in result.stderr.splitlines() if "cannot write to GPUMEM_LOG_FILE" in line]
        self.assertEqual(len(failures), 1, result.describe())
        self.assertIn("File too large", failures[0])
        self.assertIn("[info]", result.stderr)
        self.assertEqual(os.path.getsize(path), 0)

    def test_a_log_at_the_file_size_limit_never_ends_the_program(self):
        # A file-size limit of 100 bytes with SIGXFSZ's default action (ending the process), as a shell's
        # `ulimit -f` leaves it: the shim's own writes never raise it.
        path = self.path("gpumem.log")
        result = self.observe("churn", "50", env={"GPUMEM_LOG_FILE": path, "CUDASIM_REPORT": "/dev/null"},
                              fsize_limit=100)
        self.assertSucceeded(result)
        self.assertAllPrefixed(result)
        failures = [line for line in result.stderr.splitlines() if "cannot write to GPUMEM_LOG_FILE" in line]
        self.assertEqual(len(failures), 1, result.describe())
        self.assertIn("File too large", failures[0])
        self.assertIn("[info]", result.stderr)  # the log goes on on stderr
        self.assertLessEqual(os.path.getsize(path), 100)

    def test_character_devices_and_the_standard_streams_are_log_files(self):
        # /dev/null silences the log; /dev/stderr (a symbolic link to /proc/self/fd/2) is stderr itself.
        result = self.observe("churn", "50", env={"GPUMEM_LOG_FILE": "/dev/null"})
        self.assertSucceeded(result)
        self.assertNotIn("gpumem:", result.stderr, result.describe())
        for name in ("/dev/stderr", "/proc/self/fd/2"):
            with self.subTest(path=name):
                result = self.observe("churn", "50", env={"GPUMEM_LOG_FILE": name})
                self.assertSucceeded(result)
                self.assertAllPrefixed(result)
                self.assertIn("gpumem: [info]", result.stderr, result.describe())
                self.assertNotIn("[error]", result.stderr, result.describe())
        result = self.observe("churn", "50", env={"GPUMEM_LOG_FILE": "/dev/stdout"})
        self.assertSucceeded(result)
        self.assertIn("gpumem: [info]", result.stdout, result.describe())
        self.assertNotIn("gpumem:", result.stderr, result.describe())

    def test_no_descriptor_of_the_shim_survives_exec(self):
        outputs = {"GPUMEM_LOG_FILE": self.path("gpumem.log"), "GPUMEM_TRACE": self.path("trace.csv"),
                   "GPUMEM_STATS_FILE": self.path("stats.json"), "CUDASIM_REPORT": self.path("report.json")}
        result = self.observe("exec", "/bin/sh", "-c", 'ls -l "/proc/$$/fd"', env=outputs)
        self.assertSucceeded(result)
        self.assertIn("[info]", open(outputs["GPUMEM_LOG_FILE"]).read())  # the log really was open
        for path in outputs.values():
            self.assertNotIn(path, result.stdout, result.describe())

    def test_stderr_whose_reader_went_away_raises_no_sigpipe(self):
        read_end, write_end = os.pipe()
        os.close(read_end)
        env = testlib.clean_environment()
        env.update(self.ENV, LD_LIBRARY_PATH=testlib.sim_dir(), LD_PRELOAD=testlib.shim_path())
        try:
            proc = subprocess.run([testlib.program_path("observe_scenarios"), "churn", "50"], env=env,
                                  stdout=subprocess.PIPE, stderr=write_end, timeout=30)
        finally:
            os.close(write_end)
        self.assertEqual(proc.returncode, 0, proc.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
