"""Legacy CUDA IPC between processes (docs/ipc.md), in the shapes of three real users, each run over
the simulator without gpumem and with it in every mode: PyTorch's tensor at an offset in an exported
segment (ipc_tensor_share), vLLM's custom all-reduce across N ranks (ipc_all_reduce), NCCL's legacy
IPC probe (ipc_p2p_probe). Child processes inherit the environment, LD_PRELOAD included."""

import subprocess
import unittest

from gpumem_testlib import TestCase, clean_environment, key_values, program_path, run, shim_path, sim_dir

TENSOR = program_path("ipc_tensor_share")
ALL_REDUCE = program_path("ipc_all_reduce")
P2P_PROBE = program_path("ipc_p2p_probe")

SIM = {"CUDASIM_DEVICE_MEMORY": "4GiB"}
# name -> (preload the shim?, environment)
CONFIGURATIONS = {
    "without gpumem": (False, {}),
    "bfc preallocated": (True, {}),
    "bfc growth": (True, {"GPUMEM_PREALLOCATE": "false"}),
    "platform": (True, {"GPUMEM_MODE": "platform"}),
    "cuda_async preallocated": (True, {"GPUMEM_MODE": "cuda_async"}),
    "cuda_async growth": (True, {"GPUMEM_MODE": "cuda_async", "GPUMEM_PREALLOCATE": "false"}),
    "off": (True, {"GPUMEM_MODE": "off"}),
}
# Configurations whose every cudaMalloc block gets gpumem's handle (cuda_async: pool blocks, shared
# through the pool), and those where blocks inside regions do (bfc).
ALWAYS_TOKENS = {"cuda_async preallocated", "cuda_async growth"}
TOKEN_CONFIGURATIONS = {"bfc preallocated", "bfc growth"} | ALWAYS_TOKENS
# How gpumem's own handles begin (shim/ipc/ipc_token.h).
TOKEN_MAGIC_HEX = b"gpumem-ipc-tokn1".hex()


def environment(preload: bool, env: dict) -> dict:
    full = clean_environment()
    full.update(SIM)
    full["LD_LIBRARY_PATH"] = sim_dir()
    if preload:
        full["LD_PRELOAD"] = shim_path()
    full.update(env)
    return full


def start_waiting_exporter(env: dict) -> subprocess.Popen:
    """An exporter that prints its segment's handle, then holds it until its stdin closes."""
    return subprocess.Popen([TENSOR, "export-and-wait"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)


def configurations():
    """(name, preload, environment) for each configuration; run each in its own subTest."""
    return [(name, preload, {**SIM, **env}) for name, (preload, env) in CONFIGURATIONS.items()]


class IpcTestCase(TestCase):
    def assertNoShimErrors(self, result):
        self.assertNotIn("gpumem: [error]", result.stderr, result.describe())


class TensorShare(IpcTestCase):
    def test_tensor_at_an_offset_in_an_exported_segment(self):
        for name, preload, env in configurations():
            with self.subTest(configuration=name):
                result = run([TENSOR, "producer"], env=env, preload=preload)
                self.assertSucceeded(result)
                out = key_values(result.stdout)
                self.assertEqual(out, {
                    "export": "cudaSuccess",
                    "own_open": "cudaErrorDeviceUninitialized",  # the exporting process cannot open it
                    "tensor": "ok", "same_pointer": "1", "block": "ok", "consumer_exit": "0",
                    "reply": "ok",
                    "open": "cudaErrorInvalidValue", "stale_exit": "0",  # the freed block's handle
                }, result.describe())
                if name in TOKEN_CONFIGURATIONS:
                    # Pooled blocks: the freed one is named in one line by the importer.
                    self.assertEqual(result.stderr.count("has freed the block this handle exported"), 1,
                                     result.describe())
                else:
                    self.assertNoShimErrors(result)

    def test_a_handle_of_an_exited_exporter_fails_cleanly(self):
        for name, preload, env in configurations():
            with self.subTest(configuration=name):
                exporter = run([TENSOR, "export-and-exit"], env=env, preload=preload)
                self.assertSucceeded(exporter)
                handle = key_values(exporter.stdout)["handle"]
                opened = run([TENSOR, "open", handle], env=env, preload=preload)
                self.assertSucceeded(opened)
                self.assertEqual(key_values(opened.stdout), {"open": "cudaErrorInvalidValue"}, opened.describe())
                # A block inside a region has gpumem's handle, whose importer says why in one line; a
                # block that starts a region (growth mode's first large one) has the driver's own.
                is_token = handle.startswith(TOKEN_MAGIC_HEX)
                if name == "bfc preallocated" or name in ALWAYS_TOKENS:
                    self.assertTrue(is_token, handle)
                self.assertEqual(opened.stderr.count("has exited"), 1 if is_token else 0, opened.describe())

    def test_an_open_mapping_outlives_its_exporter(self):
        for name, preload, env in configurations():
            with self.subTest(configuration=name):
                full_env = environment(preload, env)
                exporter = start_waiting_exporter(full_env)
                handle = key_values(exporter.stdout.readline())["handle"]
                holder = subprocess.Popen([TENSOR, "hold", handle], env=full_env, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, text=True)
                self.assertEqual(holder.stdout.readline().strip(), "opened=ok")
                exporter.stdin.close()
                self.assertEqual(exporter.wait(timeout=60), 0)
                exporter.stdout.close()
                holder.stdin.close()
                self.assertEqual(holder.stdout.read().strip(), "held=ok")
                self.assertEqual(holder.wait(timeout=60), 0)
                holder.stdout.close()

    def test_an_importer_without_gpumem_gets_a_clean_error_for_a_pooled_block(self):
        # gpumem's handle of a block inside a region or of a pool is no driver handle: the driver
        # refuses it. An importer under gpumem opens it, whatever its own mode.
        for name in ["bfc preallocated", "cuda_async preallocated", "cuda_async growth"]:
            with self.subTest(configuration=name):
                env = environment(True, CONFIGURATIONS[name][1])
                exporter = start_waiting_exporter(env)
                try:
                    handle = key_values(exporter.stdout.readline())["handle"]
                    self.assertTrue(handle.startswith(TOKEN_MAGIC_HEX), handle)
                    plain = run([TENSOR, "open", handle], env=SIM, preload=False)
                    self.assertSucceeded(plain)
                    self.assertEqual(key_values(plain.stdout), {"open": "cudaErrorInvalidValue"}, plain.describe())
                    shimmed = run([TENSOR, "open", handle], env=SIM, preload=True)
                    self.assertSucceeded(shimmed)
                    self.assertEqual(key_values(shimmed.stdout), {"open": "cudaSuccess"}, shimmed.describe())
                    self.assertNoShimErrors(shimmed)
                finally:
                    exporter.stdin.close()
                    self.assertEqual(exporter.wait(timeout=60), 0)
                    exporter.stdout.close()


class AllReduce(IpcTestCase):
    def test_every_rank_opens_every_other_ranks_buffer(self):
        for name, preload, env in configurations():
            with self.subTest(configuration=name):
                result = run([ALL_REDUCE, "launch", "4"], env=env, preload=preload)
                self.assertSucceeded(result)
                self.assertEqual(key_values(result.stdout), {"all_reduce": "ok ranks=4"}, result.describe())
                self.assertNoShimErrors(result)


class P2pProbe(IpcTestCase):
    def test_legacy_ipc_probe_reports_p2p_usable(self):
        for name, preload, env in configurations():
            with self.subTest(configuration=name):
                result = run([P2P_PROBE, "probe"], env=env, preload=preload)
                self.assertSucceeded(result)
                self.assertEqual(key_values(result.stdout), {"p2p": "usable"}, result.describe())
                self.assertNoShimErrors(result)


if __name__ == "__main__":
    unittest.main()
