"""Tests of scripts/gpumem-run, the wrapper that runs a program with the shim preloaded.

Every option's effect is checked twice: in what --print-env says it would set, and in the environment
the program really gets (`env`, and the policy_probe program, which prints the policy the shim derives
from its environment). Then: bad options (status 2, a message, the program not run), exit status and
signal pass-through, `--`, LD_PRELOAD appending, the simulator options, and the installed layout.
"""

import glob
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import gpumem_testlib as testlib

BUILD_ROOT = os.environ.get("GPUMEM_TEST_BUILD_ROOT", "")
SOURCE_ROOT = os.environ.get("GPUMEM_TEST_SOURCE_ROOT", "")
WRAPPER = os.path.join(BUILD_ROOT, "scripts", "gpumem-run")
PROGRAMS_DIR = os.path.join(BUILD_ROOT, "tests", "integration", "programs")
POLICY_PROBE = os.path.join(PROGRAMS_DIR, "policy_probe")
WRAPPER_ALLOC = os.path.join(PROGRAMS_DIR, "wrapper_alloc")
MiB = 1 << 20
GiB = 1 << 30

# One option (with its value) -> the variables it must set, as --print-env writes them.
OPTION_EFFECTS = [
    (["--mode", "bfc"], {"GPUMEM_MODE": "bfc"}),
    (["--mode", "platform"], {"GPUMEM_MODE": "platform"}),
    (["--mode", "cuda_async"], {"GPUMEM_MODE": "cuda_async"}),
    (["--mode", "off"], {"GPUMEM_MODE": "off"}),
    (["--mode=Platform"], {"GPUMEM_MODE": "platform"}),
    (["--fraction", "0.5"], {"GPUMEM_MEM_FRACTION": "0.5"}),
    (["--fraction=.25"], {"GPUMEM_MEM_FRACTION": ".25"}),
    (["--fraction", "1"], {"GPUMEM_MEM_FRACTION": "1"}),
    (["--limit", "10GiB"], {"GPUMEM_LIMIT": "10GiB"}),
    (["--limit=1e9"], {"GPUMEM_LIMIT": "1e9"}),
    (["--limit", "512MB"], {"GPUMEM_LIMIT": "512MB"}),
    (["--limit", "0=10GiB, 1=20GiB"], {"GPUMEM_LIMIT": "0=10GiB, 1=20GiB"}),
    (["--per-rank"], {"GPUMEM_PER_RANK": "auto"}),
    (["--fraction-of", "free"], {"GPUMEM_FRACTION_OF": "free"}),
    (["--fraction-of", "total"], {"GPUMEM_FRACTION_OF": "total"}),
    (["--preallocate"], {"GPUMEM_PREALLOCATE": "true"}),
    (["--no-preallocate"], {"GPUMEM_PREALLOCATE": "false"}),
    (["--garbage-collection"], {"GPUMEM_GARBAGE_COLLECTION": "true"}),
    (["--no-garbage-collection"], {"GPUMEM_GARBAGE_COLLECTION": "false"}),
    (["--async-prealloc", "-1"], {"GPUMEM_ASYNC_PREALLOC": "-1"}),
    (["--async-prealloc", "256MiB"], {"GPUMEM_ASYNC_PREALLOC": "256MiB"}),
    (["--free-sync", "defer"], {"GPUMEM_FREE_SYNC": "defer"}),
    (["--free-sync", "sync"], {"GPUMEM_FREE_SYNC": "sync"}),
    (["--free-sync", "none"], {"GPUMEM_FREE_SYNC": "none"}),
    (["--region-source", "vmm"], {"GPUMEM_REGION_SOURCE": "vmm"}),
    (["--region-source=auto"], {"GPUMEM_REGION_SOURCE": "auto"}),
    (["--split-rule", "xla"], {"GPUMEM_SPLIT_RULE": "xla"}),
    (["--log-level", "trace"], {"GPUMEM_LOG_LEVEL": "trace"}),
    (["--log-level", "OFF"], {"GPUMEM_LOG_LEVEL": "off"}),
    (["--log-file", "/tmp/gpumem log.txt"], {"GPUMEM_LOG_FILE": "/tmp/gpumem log.txt"}),
    (["--strict"], {"GPUMEM_STRICT": "1"}),
    (["--no-frameworks"], {"GPUMEM_FRAMEWORKS": "0"}),
    (["--stats"], {"GPUMEM_STATS": "1"}),
    (["--stats-file", "/tmp/stats-%p.json"], {"GPUMEM_STATS_FILE": "/tmp/stats-%p.json"}),
    (["--trace=/tmp/t.csv"], {"GPUMEM_TRACE": "/tmp/t.csv"}),
    (["--share"], {"GPUMEM_SHARE": "auto"}),
    (["--share-dir", "/srv/gpumem"], {"GPUMEM_SHARE_DIR": "/srv/gpumem"}),
    (["--share-weight", "2.5"], {"GPUMEM_SHARE_WEIGHT": "2.5"}),
    (["--share-weight=1000"], {"GPUMEM_SHARE_WEIGHT": "1000"}),
    (["--share-min", "4GiB"], {"GPUMEM_SHARE_MIN": "4GiB"}),
    (["--share-wait", "500ms"], {"GPUMEM_SHARE_WAIT": "500ms"}),
    (["--share-wait=0"], {"GPUMEM_SHARE_WAIT": "0"}),
]

# Bad command lines -> a piece of the message each must print.
BAD_COMMAND_LINES = [
    (["--mode", "fast"], "--mode: 'fast' is not one of bfc, platform, cuda_async, off"),
    (["--mode="], "--mode: '' is not one of"),
    (["--fraction", "0"], "--fraction: '0' is not a fraction in (0, 1]"),
    (["--fraction", "1.5"], "--fraction: '1.5' is not a fraction in (0, 1]"),
    (["--fraction", "-0.5"], "is not a fraction in (0, 1]"),
    (["--fraction", "nan"], "is not a fraction in (0, 1]"),
    (["--fraction", "inf"], "is not a fraction in (0, 1]"),
    (["--fraction", "0.5x"], "is not a fraction in (0, 1]"),
    (["--limit", "0"], "--limit: '0' is not a byte size above 0"),
    (["--limit", "-1G"], "--limit: '-1G' is not a byte size above 0"),
    (["--limit", "ten"], "is not a byte size above 0"),
    (["--limit", "10GiBs"], "is not a byte size above 0"),
    (["--limit", "1e30"], "is not a byte size above 0"),
    (["--limit", "255"], "--limit: '255' is less than 256 bytes, one granule of the pool"),
    (["--limit", "1G", "--fraction", "0.5"], "--limit and --fraction exclude each other"),
    (["--limit", "0=1G,0=2G"], "--limit: '0=1G,0=2G' is not a list of DEVICE=SIZE with each device from 0 to 63 once"),
    (["--limit", "64=1G"], "--limit: '64=1G' is not a list of DEVICE=SIZE"),
    (["--limit", "0=1G,"], "--limit: '0=1G,' is not a list of DEVICE=SIZE"),
    (["--limit", "0=100"], "--limit: '100' is less than 256 bytes"),
    (["--per-rank=4"], "--per-rank takes no value"),
    (["--fraction-of", "available"], "--fraction-of: 'available' is not one of total, free"),
    (["--async-prealloc", "-2"], "--async-prealloc: '-2' is not a byte size"),
    (["--free-sync", "later"], "--free-sync: 'later' is not one of defer, sync, none"),
    (["--region-source", "heap"], "--region-source: 'heap' is not one of classic, vmm, auto"),
    (["--split-rule", "loose"], "--split-rule: 'loose' is not one of tight, xla"),
    (["--log-level", "verbose"], "--log-level: 'verbose' is not one of off, error, warn, info, debug, trace"),
    (["--log-file="], "--log-file needs a file name"),
    (["--sim-devices", "2"], "--sim-devices and --sim-memory need --sim"),
    (["--sim", "--sim-devices", "0"], "--sim-devices: '0' is not a device count"),
    (["--sim", "--sim-devices", "two"], "--sim-devices: 'two' is not a device count"),
    (["--sim", "--sim-memory", "0"], "--sim-memory: '0' is not a byte size above 0"),
    (["--sim", "--sim-memory", "lots"], "--sim-memory: 'lots' is not a byte size above 0"),
    (["--sim", "--sim-memory", "8G,"], "--sim-memory: '8G,' is not a byte size above 0 or a comma list"),
    (["--sim", "--sim-memory", "8G,,2G"], "--sim-memory: '8G,,2G' is not a byte size above 0 or a comma list"),
    (["--sim", "--sim-devices", "65"], "--sim-devices: '65' is not a device count from 1 to 64"),
    (["--stats-file="], "--stats-file needs a file name"),
    (["--trace="], "--trace needs a file name"),
    (["--stats=1"], "--stats takes no value"),
    (["--share=yes"], "--share takes no value"),
    (["--share-dir", "relative"], "--share-dir: 'relative' is not an absolute path"),
    (["--share-weight", "0"], "--share-weight: '0' is not a weight in (0, 1000]"),
    (["--share-weight", "1.2345"], "--share-weight: '1.2345' is not a weight"),
    (["--share-weight", "1001"], "--share-weight: '1001' is not a weight"),
    (["--share-min", "lots"], "--share-min: 'lots' is not a byte size"),
    (["--share-wait", "5"], "--share-wait: '5' is not a duration"),
    (["--bogus"], "unknown option '--bogus'"),
    (["-x"], "unknown option '-x'"),
    (["--no-preallocate=yes"], "--no-preallocate takes no value"),
]


def wrapper(args, env=None, program=None):
    """Runs gpumem-run with `args`, then `program` (a list) if given, in a clean environment."""
    return testlib.run([WRAPPER, *args, *(program or [])], env=env, preload=False, sim=False, timeout=30)


def parse_print_env(text):
    """--print-env's output -> (variables exported, variables unset)."""
    exported, unset = {}, []
    for line in text.splitlines():
        words = shlex.split(line)
        if words[0] == "export":
            name, _, value = words[1].partition("=")
            exported[name] = value
        elif words[0] == "unset":
            unset.extend(words[1:])
        else:
            raise AssertionError(f"unexpected --print-env line: {line!r}")
    return exported, unset


def parse_env_output(text):
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def same_file(a, b):
    return os.path.realpath(a) == os.path.realpath(b)


class WrapperTestCase(testlib.TestCase):
    def print_env(self, args, env=None):
        result = wrapper(["--print-env", *args], env=env)
        self.assertSucceeded(result)
        # ld.so complains (on stderr) about libraries a test puts in LD_PRELOAD that do not exist.
        if "LD_PRELOAD" not in (env or {}):
            self.assertEqual(result.stderr, "", result.describe())
        return parse_print_env(result.stdout)

    def program_env(self, args, env=None):
        result = wrapper(args, env=env, program=["env"])
        self.assertSucceeded(result)
        return parse_env_output(result.stdout)


class OptionTest(WrapperTestCase):
    def test_no_option_preloads_the_shim_and_sets_nothing_else(self):
        exported, unset = self.print_env([])
        self.assertEqual(list(exported), ["LD_PRELOAD"])
        self.assertTrue(same_file(exported["LD_PRELOAD"], testlib.shim_path()), exported)
        self.assertEqual(unset, [])

    def test_each_option_in_print_env(self):
        for args, expected in OPTION_EFFECTS:
            with self.subTest(args=args):
                exported, _ = self.print_env(args)
                policy = {k: v for k, v in exported.items() if k.startswith("GPUMEM_")}
                self.assertEqual(policy, expected)

    def test_each_option_reaches_the_program(self):
        for args, expected in OPTION_EFFECTS:
            with self.subTest(args=args):
                seen = self.program_env(args)
                # Less what libgpumem.so itself writes when it is loaded (docs/frameworks.md).
                policy = {k: v for k, v in seen.items() if k.startswith("GPUMEM_")
                          and k != "GPUMEM_FRAMEWORKS_SET" and not k.startswith("GPUMEM_SAVED_")}
                self.assertEqual(policy, expected)
                self.assertTrue(same_file(seen["LD_PRELOAD"], testlib.shim_path()), seen["LD_PRELOAD"])

    def test_what_it_exports_is_what_the_policy_reads(self):
        # The shim's own parser (policy_probe) accepts every value the wrapper lets through.
        for args, _ in OPTION_EFFECTS:
            with self.subTest(args=args):
                result = wrapper(args, program=[POLICY_PROBE])
                self.assertSucceeded(result)
        result = wrapper(["--mode", "cuda_async", "--no-preallocate", "--fraction", "0.5", "--fraction-of", "free",
                          "--free-sync", "sync", "--no-garbage-collection", "--async-prealloc", "1GiB",
                          "--log-level", "info", "--log-file", "/tmp/g.log", "--stats", "--stats-file",
                          "/tmp/s-%p.json", "--trace", "/tmp/t.csv", "--no-frameworks"], program=[POLICY_PROBE])
        self.assertSucceeded(result)
        self.assertEqual(
            result.stdout.strip(),
            "mode=cuda_async(GPUMEM_MODE) preallocate=off(GPUMEM_PREALLOCATE) "
            "limit=0.5(GPUMEM_MEM_FRACTION) of free(GPUMEM_FRACTION_OF) free_sync=sync(GPUMEM_FREE_SYNC) "
            "garbage_collection=off(GPUMEM_GARBAGE_COLLECTION) region_source=auto(default) "
            "split_rule=tight(default) async_prealloc=1GiB(GPUMEM_ASYNC_PREALLOC) "
            "log_level=info(GPUMEM_LOG_LEVEL) log_file=\"/tmp/g.log\"(GPUMEM_LOG_FILE) stats=on(GPUMEM_STATS) "
            "stats_file=\"/tmp/s-%p.json\"(GPUMEM_STATS_FILE) trace=\"/tmp/t.csv\"(GPUMEM_TRACE) "
            "frameworks=off(GPUMEM_FRAMEWORKS)")
        limited = wrapper(["--limit", "1.5G"], program=[POLICY_PROBE])
        self.assertSucceeded(limited)
        self.assertIn(" limit=1536MiB(GPUMEM_LIMIT) ", limited.stdout)

    def test_options_override_xla_and_tf_variables(self):
        env = {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform", "TF_FORCE_GPU_ALLOW_GROWTH": "false"}
        result = wrapper(["--mode", "bfc", "--no-preallocate"], env=env, program=[POLICY_PROBE])
        self.assertSucceeded(result)
        self.assertIn("mode=bfc(GPUMEM_MODE) preallocate=off(GPUMEM_PREALLOCATE)", result.stdout)

    def test_inherited_variables_apply_where_no_option_is_given(self):
        env = {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.3", "GPUMEM_FREE_SYNC": "none"}
        seen = self.program_env(["--mode", "platform"], env=env)
        self.assertEqual(seen["XLA_PYTHON_CLIENT_MEM_FRACTION"], "0.3")
        self.assertEqual(seen["GPUMEM_FREE_SYNC"], "none")
        self.assertEqual(seen["GPUMEM_MODE"], "platform")
        # An option replaces an inherited GPUMEM_* value.
        self.assertEqual(self.program_env(["--free-sync", "sync"], env=env)["GPUMEM_FREE_SYNC"], "sync")

    def test_fraction_unsets_an_inherited_limit(self):
        # GPUMEM_LIMIT would win over the fraction asked for on the command line.
        env = {"GPUMEM_LIMIT": "1GiB"}
        exported, unset = self.print_env(["--fraction", "0.5"], env=env)
        self.assertEqual(unset, ["GPUMEM_LIMIT"])
        self.assertEqual(exported["GPUMEM_MEM_FRACTION"], "0.5")
        seen = self.program_env(["--fraction", "0.5"], env=env)
        self.assertNotIn("GPUMEM_LIMIT", seen)
        self.assertEqual(self.program_env([], env=env)["GPUMEM_LIMIT"], "1GiB")

    def test_last_of_a_repeated_option_wins(self):
        exported, _ = self.print_env(["--mode", "off", "--mode", "platform", "--preallocate", "--no-preallocate"])
        self.assertEqual(exported["GPUMEM_MODE"], "platform")
        self.assertEqual(exported["GPUMEM_PREALLOCATE"], "false")

    def test_print_env_output_can_be_evaluated_by_a_shell(self):
        args = ["--print-env", "--log-file", "/tmp/a b'c", "--mode", "off"]
        script = f'eval "$({shlex.join([WRAPPER, *args])})" && printf "%s\\n" "$GPUMEM_LOG_FILE" "$GPUMEM_MODE"'
        result = testlib.run(["bash", "-c", script], preload=False, sim=False)
        self.assertSucceeded(result)
        self.assertEqual(result.stdout, "/tmp/a b'c\noff\n")

    def test_print_env_does_not_run_the_program(self):
        result = wrapper(["--print-env"], program=["sh", "-c", "echo ran"])
        self.assertSucceeded(result)
        self.assertNotIn("ran", result.stdout.splitlines())  # a line of its own: paths may hold "ran"


class BadOptionTest(WrapperTestCase):
    def test_bad_options_exit_2_with_a_message_and_do_not_run_the_program(self):
        for args, message in BAD_COMMAND_LINES:
            with self.subTest(args=args):
                result = wrapper(args, program=["sh", "-c", "echo ran"])
                self.assertEqual(result.returncode, 2, result.describe())
                self.assertTrue(result.stderr.startswith("gpumem-run: --") or
                                result.stderr.startswith("gpumem-run: unknown option"), result.stderr)
                self.assertIn(message, result.stderr)
                self.assertIn("Try 'gpumem-run --help'", result.stderr)
                self.assertEqual(result.stdout, "")

    def test_missing_program_or_value(self):
        for args in ([], ["--mode", "platform"], ["--"], ["--mode"], ["--limit"]):
            with self.subTest(args=args):
                result = wrapper(args)
                self.assertEqual(result.returncode, 2, result.describe())
                self.assertRegex(result.stderr, r"gpumem-run: (no program given|--\w+ needs a value)")

    def test_program_not_found(self):
        result = wrapper([], program=["gpumem-no-such-program-here"])
        self.assertEqual(result.returncode, 127, result.describe())
        self.assertIn("gpumem-no-such-program-here: command not found", result.stderr)
        with tempfile.NamedTemporaryFile() as not_executable:
            result = wrapper([], program=[not_executable.name])
            self.assertEqual(result.returncode, 126, result.describe())
            self.assertIn("not executable", result.stderr)


class PassThroughTest(WrapperTestCase):
    def test_exit_status(self):
        for status in (0, 1, 7, 255):
            with self.subTest(status=status):
                self.assertEqual(wrapper([], program=["sh", "-c", f"exit {status}"]).returncode, status)

    def test_signal(self):
        # Killed by the signal itself, not a shell's 128+N: the program replaced the wrapper.
        for sig in (signal.SIGTERM, signal.SIGKILL, signal.SIGSEGV):
            with self.subTest(signal=sig.name):
                result = wrapper(["--mode", "platform"], program=["sh", "-c", f"kill -{int(sig)} $$"])
                self.assertEqual(result.returncode, -sig, result.describe())

    def test_program_replaces_the_wrapper(self):
        # Same process: nothing stays behind to interfere with signals, stdin or the exit status.
        popen = subprocess.Popen([WRAPPER, "sh", "-c", "echo $$"], stdout=subprocess.PIPE, text=True,
                                 env=testlib.clean_environment())
        out, _ = popen.communicate(timeout=30)
        self.assertEqual(popen.returncode, 0)
        self.assertEqual(int(out), popen.pid)

    def test_stdin_and_arguments_pass_unchanged(self):
        args = ["a b", "", "*", "--mode", "bogus", "$HOME", "--"]
        result = testlib.run([WRAPPER, "--mode", "off", "--", "sh", "-c", 'cat; printf "[%s]\\n" "$@"', "sh", *args],
                             preload=False, sim=False, input_text="from stdin\n")
        self.assertSucceeded(result)
        self.assertEqual(result.stdout, "from stdin\n" + "".join(f"[{a}]\n" for a in args))

    def test_double_dash_ends_options(self):
        # After --, a program whose name looks like an option is run, not parsed.
        with tempfile.TemporaryDirectory() as tmp:
            program = os.path.join(tmp, "--mode")
            with open(program, "w") as f:
                f.write("#!/bin/sh\necho \"dashed $GPUMEM_MODE\"\n")
            os.chmod(program, 0o755)
            result = testlib.run([WRAPPER, "--mode", "platform", "--", "--mode"], env={"PATH": f"{tmp}:/usr/bin:/bin"},
                                 preload=False, sim=False)
            self.assertSucceeded(result)
            self.assertEqual(result.stdout, "dashed platform\n")
        # Options after the program are the program's.
        result = wrapper(["--"], program=["printf", "%s\\n", "--mode", "x"])
        self.assertSucceeded(result)
        self.assertEqual(result.stdout, "--mode\nx\n")


class PreloadTest(WrapperTestCase):
    def test_appends_to_an_existing_preload(self):
        exported, _ = self.print_env([], env={"LD_PRELOAD": "/opt/other/libfirst.so"})
        first, shim = exported["LD_PRELOAD"].split(":")
        self.assertEqual(first, "/opt/other/libfirst.so")
        self.assertTrue(same_file(shim, testlib.shim_path()))

    def test_appends_to_a_space_separated_preload(self):
        exported, _ = self.print_env([], env={"LD_PRELOAD": "/a.so /b.so"})
        self.assertTrue(exported["LD_PRELOAD"].startswith("/a.so /b.so:"), exported)

    def test_does_not_preload_twice(self):
        shim = os.path.realpath(testlib.shim_path())
        for existing in (shim, f"/a.so:{shim}", f"{shim} /b.so"):
            with self.subTest(existing=existing):
                exported, _ = self.print_env([], env={"LD_PRELOAD": existing})
                self.assertEqual(exported["LD_PRELOAD"], existing)

    def test_program_really_has_the_shim_loaded(self):
        # /proc/self/maps of the program (cat) lists the shim.
        result = wrapper([], program=["cat", "/proc/self/maps"])
        self.assertSucceeded(result)
        self.assertIn(os.path.realpath(testlib.shim_path()), result.stdout)


class SimulatorTest(WrapperTestCase):
    def test_sim_puts_the_simulator_first_on_the_library_path(self):
        exported, _ = self.print_env(["--sim"], env={"LD_LIBRARY_PATH": "/opt/lib"})
        first, rest = exported["LD_LIBRARY_PATH"].split(":", 1)
        self.assertTrue(same_file(first, testlib.sim_dir()), first)
        self.assertEqual(rest, "/opt/lib")
        self.assertNotIn("CUDASIM_DEVICES", exported)
        self.assertNotIn("CUDASIM_DEVICE_MEMORY", exported)
        self.assertNotIn("LD_LIBRARY_PATH", self.print_env([])[0])

    def test_sim_devices_and_memory(self):
        cases = [("1GiB", 1 << 30), ("1.5G", 3 << 29), ("512MB", 512_000_000), ("1e9", 10**9), ("80 GiB", 80 << 30),
                 ("4096", 4096)]
        cases += [("8G,2GiB", f"{8 << 30},{2 << 30}"), ("1GiB, 512M", f"{1 << 30},{512 << 20}")]
        for text, size in cases:
            with self.subTest(memory=text):
                exported, _ = self.print_env(["--sim", "--sim-devices", "3", "--sim-memory", text])
                self.assertEqual(exported["CUDASIM_DEVICES"], "3")
                self.assertEqual(exported["CUDASIM_DEVICE_MEMORY"], str(size))

    def test_share_with_sim_shares_the_simulated_devices(self):
        exported, _ = self.print_env(["--sim", "--share"])
        self.assertEqual(exported["GPUMEM_SHARE"], "auto")
        self.assertEqual(exported["CUDASIM_SHARED_DEVICES"], "1")
        self.assertNotIn("CUDASIM_SHARED_DEVICES", self.print_env(["--share"])[0])
        self.assertNotIn("CUDASIM_SHARED_DEVICES", self.print_env(["--sim"])[0])

    def test_sim_reaches_the_program(self):
        seen = self.program_env(["--sim", "--sim-devices=2", "--sim-memory=2GiB"])
        self.assertTrue(same_file(seen["LD_LIBRARY_PATH"].split(":")[0], testlib.sim_dir()))
        self.assertEqual(seen["CUDASIM_DEVICES"], "2")
        self.assertEqual(seen["CUDASIM_DEVICE_MEMORY"], str(2 << 30))


    def test_a_device_smaller_than_a_context_is_named(self):
        # Each simulated context takes CUDASIM_CONTEXT_OVERHEAD (300 MiB): a 64 MiB device runs nothing,
        # and the simulator says why in one line.
        result = testlib.run([WRAPPER, "--sim", "--sim-memory", "64MiB", WRAPPER_ALLOC], preload=False, sim=True)
        self.assertNotEqual(result.returncode, 0, result.describe())
        self.assertIn("cudasim: device 0 has 67108864 bytes (CUDASIM_DEVICE_MEMORY), less than the 314572800 bytes "
                      "a context takes (CUDASIM_CONTEXT_OVERHEAD)", result.stderr)
        self.assertIn("context takes 300 MiB", wrapper(["--help"]).stdout)


class EndToEndTest(WrapperTestCase):
    """A driver-API program (one 1 MiB allocation) run through the wrapper over the simulator: the
    options reach the shim, as the simulator's report of what the driver was asked shows."""

    def run_alloc(self, args):
        result = testlib.run([WRAPPER, "--sim", "--sim-memory", "1GiB", *args, WRAPPER_ALLOC],
                             env={"CUDASIM_CONTEXT_OVERHEAD": "0"}, preload=False, sim=True)
        self.assertSucceeded(result)
        self.assertIsNotNone(result.report, result.describe())
        return result

    def test_default_preallocates_three_quarters(self):
        result = self.run_alloc([])
        device = result.device(0)
        self.assertEqual(device["total_bytes"], GiB)
        # The arena's, in pieces of virtual memory (the default region source): no cuMemAlloc.
        self.assertEqual(device["driver_allocs"], 0)
        self.assertEqual(device["vmm"]["peak_bytes"], 768 * MiB)
        self.assertEqual(device["peak_bytes_reserved"], 768 * MiB)
        self.assertIn(f"total={768 * MiB} ", result.stdout)

    def test_fraction_and_limit(self):
        for args, reserved in ((["--fraction", "0.5"], 512 * MiB), (["--limit", "100MiB"], 100 * MiB)):
            with self.subTest(args=args):
                device = self.run_alloc(args).device(0)
                self.assertEqual(device["driver_allocs"], 0)
                self.assertEqual(device["vmm"]["peak_bytes"], reserved)
                self.assertEqual(device["peak_bytes_reserved"], reserved)

    def test_platform_and_off_pass_requests_through(self):
        for mode, total in (("platform", 768 * MiB), ("off", GiB)):  # platform: the budget's limit
            with self.subTest(mode=mode):
                result = self.run_alloc(["--mode", mode])
                self.assertEqual(result.device(0)["peak_bytes_reserved"], MiB)
                self.assertIn(f"total={total} ", result.stdout)

    def test_no_preallocate_grows(self):
        device = self.run_alloc(["--no-preallocate"]).device(0)
        self.assertGreaterEqual(device["peak_bytes_reserved"], MiB)
        self.assertLess(device["peak_bytes_reserved"], 768 * MiB)

    def test_cuda_async_uses_a_pool(self):
        device = self.run_alloc(["--mode", "cuda_async"]).device(0)
        self.assertEqual(device["driver_allocs"], 0)
        self.assertGreaterEqual(device["pool"]["async_allocs"], 1)

    def test_sim_devices(self):
        result = self.run_alloc(["--sim-devices", "2"])
        self.assertEqual([d["total_bytes"] for d in result.report["devices"]], [GiB, GiB])


class InfoTest(WrapperTestCase):
    def test_help(self):
        result = wrapper(["--help"])
        self.assertSucceeded(result)
        self.assertTrue(result.stdout.startswith("Usage: gpumem-run [OPTIONS] [--] PROGRAM [ARGS...]"))
        for option in ("--mode", "--fraction", "--limit", "--fraction-of", "--preallocate", "--no-preallocate",
                       "--free-sync", "--log-level", "--log-file", "--sim", "--sim-devices", "--sim-memory",
                       "--print-env", "--version", "--async-prealloc", "--no-garbage-collection",
                       "--region-source", "--split-rule", "--per-rank", "--strict", "--check",
                       "--no-frameworks"):
            self.assertRegex(result.stdout, rf"\n\s+(-h, )?{option}\b")
        self.assertEqual(wrapper(["-h"]).stdout, result.stdout)

    def test_version_is_the_project_version(self):
        with open(os.path.join(SOURCE_ROOT, "meson.build")) as f:
            version = re.search(r"version:\s*'([^']+)'", f.read()).group(1)
        result = wrapper(["--version"])
        self.assertSucceeded(result)
        self.assertEqual(result.stdout, f"gpumem-run (gpumem) {version}\n")


class LayoutTest(WrapperTestCase):
    """The wrapper outside the build tree: installed under a prefix, and reached through a symlink."""

    @staticmethod
    def configured_value(name):
        with open(WRAPPER) as f:
            return re.search(rf"^readonly {name}='([^']*)'", f.read(), re.M).group(1)

    def test_installed_layout_under_a_moved_prefix(self):
        libdir = self.configured_value("libdir_from_prefix")
        bindir = self.configured_value("bindir_from_prefix")
        with tempfile.TemporaryDirectory() as prefix:
            os.makedirs(os.path.join(prefix, bindir))
            simulator = os.path.join(prefix, libdir, "gpumem", "cudasim")
            os.makedirs(simulator)
            installed = os.path.join(prefix, bindir, "gpumem-run")
            shutil.copy2(WRAPPER, installed)
            shutil.copy2(testlib.shim_path(), os.path.join(prefix, libdir, "libgpumem.so"))
            shutil.copy2(os.path.join(testlib.sim_dir(), "libcuda.so.1"), simulator)
            result = testlib.run([installed, "--print-env", "--sim"], preload=False, sim=False)
            self.assertSucceeded(result)
            exported, _ = parse_print_env(result.stdout)
            self.assertTrue(same_file(exported["LD_PRELOAD"], os.path.join(prefix, libdir, "libgpumem.so")), exported)
            self.assertTrue(same_file(exported["LD_LIBRARY_PATH"], simulator), exported)
            # --check finds gpumem-probe beside the simulator and gpumem-top beside itself.
            shutil.copy2(os.path.join(BUILD_ROOT, "tools", "gpumem-probe"), os.path.join(prefix, libdir, "gpumem"))
            shutil.copy2(os.path.join(SOURCE_ROOT, "scripts", "gpumem-top"), os.path.join(prefix, bindir))
            checked = testlib.run([installed, "--sim", "--check"], preload=False, sim=False)
            self.assertSucceeded(checked)
            self.assertIn(f"library:  {os.path.realpath(os.path.join(prefix, libdir, 'libgpumem.so'))}\n", checked.stdout)
            self.assertIn("devices:  1\n", checked.stdout)
            self.assertIn("gpumem-top: ", checked.stdout)

    def test_symlink_to_the_build_tree_wrapper(self):
        with tempfile.TemporaryDirectory() as tmp:
            link = os.path.join(tmp, "gpumem-run")
            os.symlink(WRAPPER, link)
            result = testlib.run([link, "--print-env"], preload=False, sim=False)
            self.assertSucceeded(result)
            self.assertTrue(same_file(parse_print_env(result.stdout)[0]["LD_PRELOAD"], testlib.shim_path()))

    def test_the_source_tree_template_uses_either_build_or_says_how_to_make_one(self):
        # scripts/gpumem-run as checked out: placeholders unfilled. It uses the source tree's
        # build-demo/ (scripts/demo's) or build/ (scripts/test's), the newer when both hold the shim,
        # and says which; with neither, it says how to build.
        with open(os.path.join(SOURCE_ROOT, "meson.build")) as f:
            version = re.search(r"version:\s*'([^']+)'", f.read()).group(1)
        with tempfile.TemporaryDirectory() as tree:
            os.makedirs(os.path.join(tree, "scripts"))
            template = os.path.join(tree, "scripts", "gpumem-run")
            shutil.copy2(os.path.join(SOURCE_ROOT, "scripts", "gpumem-run"), template)
            shutil.copy2(os.path.join(SOURCE_ROOT, "meson.build"), tree)
            result = testlib.run([template, "--version"], preload=False, sim=False)
            self.assertEqual(result.stdout, f"gpumem-run (gpumem) {version}\n", result.describe())
            result = testlib.run([template, "true"], preload=False, sim=False)
            self.assertEqual(result.returncode, 1, result.describe())
            self.assertEqual(result.stderr, f"gpumem-run: libgpumem.so is not built: run 'scripts/demo' (it builds "
                                            f"build-demo/) or 'meson setup build && ninja -C build' in "
                                            f"{os.path.realpath(tree)} first (or use an installed gpumem-run)\n")
            for name in ("build-demo", "build"):
                with self.subTest(build=name):
                    os.symlink(testlib.build_root(), os.path.join(tree, name))
                    result = testlib.run([template, "--print-env", "--sim"], preload=False, sim=False)
                    self.assertSucceeded(result)
                    exported, _ = parse_print_env(result.stdout)
                    self.assertTrue(same_file(exported["LD_PRELOAD"], testlib.shim_path()), exported)
                    self.assertTrue(same_file(exported["LD_LIBRARY_PATH"], testlib.sim_dir()), exported)
                    ran = testlib.run([template, "true"], preload=False, sim=False)
                    self.assertSucceeded(ran)
                    self.assertEqual(ran.stderr, f"gpumem-run: from the source tree: using the build in {name}/\n")
                    os.remove(os.path.join(tree, name))
            # Both: the one whose libgpumem.so is newer.
            for name in ("build-demo", "build"):
                shutil.copytree(os.path.dirname(testlib.shim_path()), os.path.join(tree, name, "shim"), symlinks=True)
            for newer, older in (("build", "build-demo"), ("build-demo", "build")):
                with self.subTest(newer=newer):
                    now = time.time()
                    os.utime(os.path.join(tree, older, "shim", "libgpumem.so"), (now - 100, now - 100))
                    os.utime(os.path.join(tree, newer, "shim", "libgpumem.so"), (now, now))
                    ran = testlib.run([template, "true"], preload=False, sim=False)
                    self.assertEqual(ran.stderr, f"gpumem-run: from the source tree: using the build in {newer}/\n")

    def test_pkg_config_finds_the_installed_header_and_library(self):
        with tempfile.TemporaryDirectory() as destdir:
            installed = subprocess.run(["meson", "install", "-C", testlib.build_root(), "--no-rebuild", "--quiet",
                                        "--destdir", destdir], capture_output=True, text=True, timeout=120)
            self.assertEqual(installed.returncode, 0, installed.stderr)
            (pc_file,) = glob.glob(os.path.join(destdir, "**", "pkgconfig", "gpumem.pc"), recursive=True)
            env = dict(os.environ, PKG_CONFIG_PATH=os.path.dirname(pc_file), PKG_CONFIG_SYSROOT_DIR=destdir)
            flags = subprocess.run(["pkg-config", "--cflags", "--libs", "gpumem"], env=env, capture_output=True,
                                   text=True, timeout=30)
            self.assertEqual(flags.returncode, 0, flags.stderr)
            source = os.path.join(destdir, "uses_gpumem.c")
            with open(source, "w") as f:
                f.write('#include <stdio.h>\n#include <gpumem.h>\n'
                        'int main(void) { printf("%s\\n", gpumem_version()); return 0; }\n')
            program = os.path.join(destdir, "uses_gpumem")
            built = subprocess.run(["cc", source, "-o", program, *flags.stdout.split()], capture_output=True,
                                   text=True, timeout=60)
            self.assertEqual(built.returncode, 0, built.stderr)
            libdir = os.path.dirname(glob.glob(os.path.join(destdir, "**", "libgpumem.so"), recursive=True)[0])
            ran = testlib.run([program], env={"LD_LIBRARY_PATH": libdir}, preload=False, sim=False)
            self.assertSucceeded(ran)
            with open(os.path.join(SOURCE_ROOT, "meson.build")) as f:
                self.assertEqual(ran.stdout.strip(), re.search(r"version:\s*'([^']+)'", f.read()).group(1))


class StrictAndCheckTest(WrapperTestCase):
    """--strict turns an invalid variable into a refusal; --check says what gpumem would do, runs nothing."""

    def test_strict_refuses_a_program_whose_environment_has_an_error(self):
        alloc = testlib.run([WRAPPER, "--sim", "--strict", WRAPPER_ALLOC], env={"GPUMEM_MODE": "bcf"}, preload=False,
                            sim=False, timeout=30)
        self.assertNotEqual(alloc.returncode, 0, alloc.describe())
        self.assertIn('gpumem: GPUMEM_MODE="bcf" is not one of bfc, platform, cuda_async, off; GPUMEM_STRICT is set',
                      alloc.stderr)
        without = testlib.run([WRAPPER, "--sim", WRAPPER_ALLOC], env={"GPUMEM_MODE": "bcf"}, preload=False, sim=False,
                              timeout=30)
        self.assertSucceeded(without)
        self.assertIn("; ignored: the mode is bfc (default)", without.stderr)

    def check(self, args, env=None):
        return testlib.run([WRAPPER, *args, "--check"], env=env, preload=False, sim=False, timeout=60)

    def test_check_over_the_simulator(self):
        with tempfile.TemporaryDirectory() as ledgers:
            result = self.check(["--sim", "--sim-devices", "2", "--sim-memory", "8GiB", "--limit", "0=1GiB",
                                 "--share-dir", ledgers])
        self.assertSucceeded(result)
        out = result.stdout
        self.assertTrue(out.startswith("gpumem-run --check: what gpumem would do here (no program is run)\n"), out)
        self.assertIn(f"library:  {os.path.realpath(testlib.shim_path())}\n", out)
        self.assertRegex(out, r"driver:   \S*/libcuda\.so\.1 \(gpumem's simulated driver: no GPU is used\), CUDA \d+\.\d+\n")
        self.assertIn("devices:  2\n", out)
        self.assertIn("  device 0: Simulated CUDA Device 0, 8 GiB (8589934592 bytes)\n"
                      "    bfc arena, preallocated at the first allocation, vmm regions (auto), limit 1 GiB "
                      "(GPUMEM_LIMIT)\n", out)
        self.assertIn("    bfc arena, preallocated at the first allocation, vmm regions (auto), limit 6 GiB "
                      "(0.75 of 8 GiB, default)\n", out)
        self.assertIn("errors:   none\n", out)
        self.assertIn("sharing:  off for this process", out)
        self.assertIn(f"gpumem-top: {ledgers}", out)
        self.assertEqual(result.stderr, "", result.describe())

    def test_check_names_each_error_and_fails(self):
        result = self.check(["--sim", "--limit", "1GiB"], env={"LOCAL_RANK": "abc", "GPUMEM_PER_RANK": "sometimes"})
        self.assertEqual(result.returncode, 1, result.describe())
        self.assertIn("errors:   2\n", result.stdout)
        self.assertIn('  gpumem: LOCAL_RANK="abc" is not a rank', result.stdout)
        self.assertIn('  gpumem: GPUMEM_PER_RANK="sometimes" is not', result.stdout)
        self.assertIn("limit 1 GiB (GPUMEM_LIMIT)", result.stdout)  # the cap holds
        strict = self.check(["--sim", "--strict"], env={"GPUMEM_MODE": "bcf"})
        self.assertEqual(strict.returncode, 1, strict.describe())
        self.assertIn("gpumem:   refuses the program: GPUMEM_STRICT is set and 1 variable is invalid", strict.stdout)

    def test_check_without_a_driver_says_so(self):
        result = self.check([])
        self.assertSucceeded(result)
        self.assertIn("driver:   none found (", result.stdout)
        self.assertIn("gpumem-run --sim runs over the simulated one", result.stdout)

    def test_check_with_sharing_lists_the_members(self):
        with tempfile.TemporaryDirectory() as ledgers:
            os.chmod(ledgers, 0o700)
            result = self.check(["--sim", "--share", "--share-dir", ledgers])
        self.assertSucceeded(result)
        self.assertIn(f"sharing:  on (GPUMEM_SHARE=auto), ledgers in {ledgers}", result.stdout)
        self.assertIn("limit: the share of the GPU its ledger gives (GPUMEM_SHARE=auto), at most 16 GiB", result.stdout)
        self.assertIn("no GPU is shared here", result.stdout)

    def test_check_reads_the_drivers_own_answers(self):
        # The shim is not preloaded into the probe: the device's total is the driver's, not a budget.
        result = self.check(["--sim", "--limit", "1GiB"], env={"LD_PRELOAD": testlib.shim_path()})
        self.assertSucceeded(result)
        self.assertIn("Simulated CUDA Device 0, 16 GiB", result.stdout)

    def test_check_takes_no_program(self):
        result = wrapper(["--check", "true"])
        self.assertEqual(result.returncode, 2, result.describe())
        self.assertIn("--check runs no program", result.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
