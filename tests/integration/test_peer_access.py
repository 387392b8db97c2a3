"""Peer access to arena blocks (cudaDeviceEnablePeerAccess, cuCtxEnablePeerAccess), as PyTorch and NCCL
enable it: the driver opens cuMemAlloc memory to the peer device by itself, but memory mapped with
cuMemCreate only to the devices cuMemSetAccess names, so a VMM-backed arena names the peers itself, on
its mappings now and later, and takes the access back when it is disabled or its last context on that
device goes. Pools are the same (cuMemPoolSetAccess): cuda_async mode opens its pool to the peers. The program (programs/peer_access.cpp) asks the simulator with cuMemGetAccess which device
may access each block; without gpumem and in the other modes the blocks are no VMM mappings."""

import unittest

from gpumem_testlib import MODE_CONFIGURATIONS, TWO_DEVICES, TestCase, key_values, program_path, run

PROGRAM = program_path("peer_access")
SIM = TWO_DEVICES
CONFIGURATIONS = MODE_CONFIGURATIONS
# Where the program's cudaMalloc memory is open only to the devices the shim names: VMM mappings, and
# cuda_async mode's pool.
VMM_CONFIGURATIONS = {"bfc preallocated", "bfc growth", "cuda_async"}


def access(name: str, vmm_answer: str) -> str:
    """What cuMemGetAccess says of a block: the VMM arena's answer, else "not_vmm"."""
    return vmm_answer if name in VMM_CONFIGURATIONS else "not_vmm"


class PeerAccessTest(TestCase):
    def run_scenario(self, scenario, preload, env):
        result = run([PROGRAM, scenario], env={**SIM, **env}, preload=preload)
        self.assertSucceeded(result)
        self.assertNotIn("gpumem: [error]", result.stderr, result.describe())
        self.assertNotIn("gpumem: [warn", result.stderr, result.describe())
        return result

    def test_runtime_peer_access_reaches_every_mapping_of_the_peer_arena(self):
        for name, (preload, env) in CONFIGURATIONS.items():
            with self.subTest(configuration=name):
                result = self.run_scenario("runtime", preload, env)
                self.assertEqual(key_values(result.stdout), {
                    "can_access_peer": "1",
                    # device 1's arena was made after device 0 enabled access to it
                    "enabled_before_first_allocation": access(name, "readwrite"),
                    "before_enable": access(name, "none"),
                    "again": "cudaErrorPeerAccessAlreadyEnabled",
                    "early_peer": access(name, "readwrite"),
                    "early_owner": access(name, "readwrite"),
                    "peer_copy": "ok",
                    # mapped after the access was enabled (growth), or with it (preallocated)
                    "late_peer": access(name, "readwrite"),
                    "not_enabled": "cudaErrorPeerAccessNotEnabled",
                    "disabled_early": access(name, "none"),
                    "disabled_late": access(name, "none"),
                    "disabled_owner": access(name, "readwrite"),
                    "intact": "ok",
                }, result.describe())

    def test_driver_contexts_keep_access_while_one_of_the_device_has_it(self):
        for name, (preload, env) in CONFIGURATIONS.items():
            with self.subTest(configuration=name):
                result = self.run_scenario("driver", preload, env)
                self.assertEqual(key_values(result.stdout), {
                    "enabled": access(name, "readwrite"),
                    "one_of_two_disabled": access(name, "readwrite"),
                    "last_reader_destroyed": access(name, "none"),
                    "owner_kept": access(name, "readwrite"),
                    "destroyed_context": "CUDA_ERROR_INVALID_CONTEXT",
                    "bad_flags": "CUDA_ERROR_INVALID_VALUE",
                    "never_enabled": "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
                }, result.describe())

    def test_memory_opened_from_another_process_is_reachable_from_peers(self):
        for name, (preload, env) in CONFIGURATIONS.items():
            with self.subTest(configuration=name):
                result = self.run_scenario("ipc", preload, env)
                self.assertEqual(key_values(result.stdout), {
                    "imported_owner": access(name, "readwrite"),
                    # cudaIpcMemLazyEnablePeerAccess: as the driver's own opened memory would be
                    "imported_peer": access(name, "readwrite"),
                    "imported_intact": "ok",
                    "importer": "ok",
                }, result.describe())


if __name__ == "__main__":
    unittest.main()
