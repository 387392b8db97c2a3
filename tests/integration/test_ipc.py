"""Legacy CUDA IPC between processes (docs/ipc.md), in the shapes of three real users, each run over
the simulator without gpumem and with it in every mode: PyTorch's tensor at an offset in an exported
segment (ipc_tensor_share), vLLM's custom all-reduce across N ranks (ipc_all_reduce), NCCL's legacy
IPC probe (ipc_p2p_probe). Child processes inherit the environment, LD_PRELOAD included."""

import fcntl
import os
import re
import struct
import subprocess
import tempfile
import threading
import unittest

from gpumem_testlib import TestCase, clean_environment, key_values, program_path, run, shim_path, sim_dir

TENSOR = program_path("ipc_tensor_share")
ALL_REDUCE = program_path("ipc_all_reduce")
P2P_PROBE = program_path("ipc_p2p_probe")

SIM = {"CUDASIM_DEVICE_MEMORY": "4GiB"}
# name -> (preload the shim?, environment)
CONFIGURATIONS = {
    "without gpumem": (False, {}),
    "bfc classic preallocated": (True, {"GPUMEM_REGION_SOURCE": "classic"}),
    "bfc classic growth": (True, {"GPUMEM_REGION_SOURCE": "classic", "GPUMEM_PREALLOCATE": "false"}),
    "platform": (True, {"GPUMEM_MODE": "platform"}),
    # The default region source, virtual memory on the simulator's devices. A small limit makes small
    # mappings (1/32 of the limit, 2 MiB on the simulator), so the 4 MiB segment lies over several.
    "bfc preallocated": (True, {"GPUMEM_LIMIT": "64MiB"}),
    "bfc growth": (True, {"GPUMEM_LIMIT": "64MiB", "GPUMEM_PREALLOCATE": "false"}),
    "cuda_async preallocated": (True, {"GPUMEM_MODE": "cuda_async"}),
    "cuda_async growth": (True, {"GPUMEM_MODE": "cuda_async", "GPUMEM_PREALLOCATE": "false"}),
    "off": (True, {"GPUMEM_MODE": "off"}),
}
# Configurations whose every cudaMalloc block gets gpumem's handle (cuda_async: pool blocks, shared
# through the pool; bfc: blocks of virtual memory, shared through its mappings), and those where
# blocks inside regions do (bfc classic).
VMM_CONFIGURATIONS = {"bfc preallocated", "bfc growth"}
ALWAYS_TOKENS = {"cuda_async preallocated", "cuda_async growth"} | VMM_CONFIGURATIONS
TOKEN_CONFIGURATIONS = {"bfc classic preallocated", "bfc classic growth"} | ALWAYS_TOKENS
# How gpumem's own handles begin (shim/exports/ipc_token.h).
TOKEN_MAGIC_HEX = b"gpumem-ipc-tokn1".hex()
# The exporter's debug line for each VMM block it shares (shim/services/ipc_service.cpp).
VMM_EXPORT = re.compile(r"the (\d+)-byte block at 0x[0-9a-f]+ is shared as (\d+) VMM mapping")
SEGMENT_BYTES = 4 * 1024 * 1024  # ipc_tensor_share.cpp's segment, the largest block it exports

# The layout an importer reads (shim/exports/ipc_token.h, export_table.cpp, export_table.h and
# vmm_span.h), to forge handles and tables as a hostile or broken process of the same user would.
TOKEN = struct.Struct("<16sQQiiII")  # magic, process number, generation, pid, table descriptor, slot, unused
TABLE_MAGIC = b"gpumem-ipc-tabl6"
TABLE_HEADER = struct.Struct("<16sQII")  # magic, process number, slots, unused
SLOT_HEADER = struct.Struct("<QQQ")  # sequence, generation, live
SLOT_BYTES = SLOT_HEADER.size + 12456  # then the ExportedBlock
TABLE_SLOTS = 4096
TABLE_BYTES = TABLE_HEADER.size + TABLE_SLOTS * SLOT_BYTES
# In an ExportedBlock: the region's handle (64 bytes), offset, size, pool descriptor, unused, the pool
# pointer's data (64 bytes), then the VMM span: offset, piece count, the list's descriptor (past 512
# pieces; else -1), and 512 inline pieces (fd, unused, size, offset in the descriptor's memory).
REGION_BLOCK = struct.Struct("<64sQQiI")
POOL_DATA = 64
VMM_SPAN = struct.Struct("<QIi")
INLINE_PIECES = 512
VMM_PIECE = struct.Struct("<iIQQ")


def forged_handle(process_number: int, generation: int, pid: int, table_fd: int, slot: int) -> str:
    return TOKEN.pack(bytes.fromhex(TOKEN_MAGIC_HEX), process_number, generation, pid, table_fd,
                      slot, 0).ljust(64, b"\0").hex()


def parse_handle(handle: str) -> dict:
    magic, number, generation, pid, table_fd, slot, _ = TOKEN.unpack_from(bytes.fromhex(handle))
    return {"process_number": number, "generation": generation, "pid": pid, "table_fd": table_fd, "slot": slot}


def slot_offset(slot: int) -> int:
    return TABLE_HEADER.size + slot * SLOT_BYTES


def forged_table(process_number: int) -> int:
    """A memfd holding an empty export table of `process_number` (every slot dead)."""
    fd = os.memfd_create("gpumem-ipc-exports")
    os.ftruncate(fd, TABLE_BYTES)
    os.pwrite(fd, TABLE_HEADER.pack(TABLE_MAGIC, process_number, TABLE_SLOTS, 0), 0)
    return fd


def write_live_slot(table_fd: int, slot: int, generation: int, block: bytes):
    os.pwrite(table_fd, SLOT_HEADER.pack(0, generation, 1) + block, slot_offset(slot))


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
                if name in VMM_CONFIGURATIONS:
                    env = {**env, "GPUMEM_LOG_LEVEL": "debug"}  # to see how many mappings the segment spans
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
                if name in VMM_CONFIGURATIONS:
                    # The segment lies over several mappings; the consumer's reply, written past its
                    # first 2 MiB through the handle of what cuMemGetAddressRange answers for the reply's
                    # address, landed ("reply": "ok").
                    exports = [(int(size), int(mappings)) for size, mappings in VMM_EXPORT.findall(result.stderr)]
                    # The segment, the block, and the segment again: cuMemGetAddressRange answers a VMM
                    # block with the block, not with the mapping under the reply.
                    self.assertEqual(len(exports), 3, result.describe())
                    segment_bytes, segment_mappings = max(exports)
                    self.assertEqual(exports.count((segment_bytes, segment_mappings)), 2, result.describe())
                    self.assertGreaterEqual(segment_bytes, SEGMENT_BYTES, result.describe())
                    self.assertGreaterEqual(segment_mappings, 2, result.describe())

    def test_a_segment_over_more_mappings_than_a_slot_holds(self):
        # A shared GPU's arena takes memory beyond its guarantee a granule per piece: with a second
        # member of ten times its weight, the producer's guarantee is about 370 MiB, so its 1.1 GiB
        # segment lies over more than 512 pieces, which the slot names through a list of its own; the
        # consumer opens it as any other.
        share_dir = tempfile.mkdtemp(prefix="gpumem-ipc-share-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", share_dir], check=False))
        shared = {"GPUMEM_SHARE": "auto", "GPUMEM_SHARE_DIR": share_dir}
        joined, done = os.path.join(share_dir, "joined"), os.path.join(share_dir, "done")
        other_env = clean_environment()
        other_env.update({**SIM, **shared, "LD_PRELOAD": shim_path(), "LD_LIBRARY_PATH": sim_dir(),
                          "GPUMEM_PREALLOCATE": "false"})
        other = subprocess.Popen([program_path("share_worker"), "alloc:2x1", f"touch:{joined}", f"wait:{done}"],
                                 env=other_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(other.wait, 60)
        self.addCleanup(lambda: open(done, "w").close())
        for _ in range(600):
            if os.path.exists(joined) or other.poll() is not None:
                break
            threading.Event().wait(0.05)
        self.assertTrue(os.path.exists(joined), "the other member did not join")
        env = {**SIM, **CONFIGURATIONS["bfc growth"][1], "GPUMEM_LIMIT": "2GiB", **shared,
               "GPUMEM_SHARE_WEIGHT": "0.1",
               "IPC_SEGMENT_BYTES": str(1100 * 2**20), "GPUMEM_LOG_LEVEL": "debug"}
        result = run([TENSOR, "producer"], env=env)
        self.assertSucceeded(result)
        self.assertEqual(key_values(result.stdout), {
            "export": "cudaSuccess", "own_open": "cudaErrorDeviceUninitialized", "tensor": "ok",
            "same_pointer": "1", "block": "ok", "consumer_exit": "0", "reply": "ok",
            "open": "cudaErrorInvalidValue", "stale_exit": "0"}, result.describe())
        exports = [(int(size), int(mappings)) for size, mappings in VMM_EXPORT.findall(result.stderr)]
        self.assertGreater(max(mappings for _, mappings in exports), INLINE_PIECES, result.describe())

    def test_a_lone_shared_arena_maps_its_guarantee_in_few_pieces(self):
        # Alone, a shared arena's guarantee is the whole limit: the same segment lies over few pieces,
        # as in an arena that shares nothing.
        share_dir = tempfile.mkdtemp(prefix="gpumem-ipc-share-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", share_dir], check=False))
        env = {**SIM, **CONFIGURATIONS["bfc growth"][1], "GPUMEM_LIMIT": "2GiB", "GPUMEM_SHARE": "auto",
               "GPUMEM_SHARE_DIR": share_dir, "IPC_SEGMENT_BYTES": str(1100 * 2**20), "GPUMEM_LOG_LEVEL": "debug"}
        result = run([TENSOR, "producer"], env=env)
        self.assertSucceeded(result)
        self.assertEqual(key_values(result.stdout)["reply"], "ok", result.describe())
        exports = [(int(size), int(mappings)) for size, mappings in VMM_EXPORT.findall(result.stderr)]
        self.assertLessEqual(max(mappings for _, mappings in exports), 64, result.describe())

    def test_a_segment_on_lent_granules_is_shared_with_its_data(self):
        # 512 MiB preallocated: pieces of 2, 2, 4 and 8 MiB, then 16 MiB each. 64 blocks of 8 MiB fill
        # it; every other one from the fourth on freed leaves 8 MiB idle in each 16 MiB piece, beside a
        # live block. No memory is left under the limit, so the 48 MiB segment lies past the
        # preallocation, on those idle granules mapped a second time: the consumer reads the tensor
        # and writes its reply there, and the kept blocks keep their bytes.
        env = {**SIM, **CONFIGURATIONS["bfc preallocated"][1], "GPUMEM_LIMIT": "512MiB",
               "IPC_FRAGMENT_BLOCKS": "64", "IPC_SEGMENT_BYTES": str(48 * 2**20), "GPUMEM_LOG_LEVEL": "debug"}
        result = run([TENSOR, "producer"], env=env)
        self.assertSucceeded(result)
        self.assertEqual(key_values(result.stdout), {
            "export": "cudaSuccess", "own_open": "cudaErrorDeviceUninitialized", "tensor": "ok",
            "same_pointer": "1", "block": "ok", "consumer_exit": "0", "reply": "ok",
            "open": "cudaErrorInvalidValue", "stale_exit": "0", "kept": "ok"}, result.describe())
        # The one error line is the stale handle's, as in every configuration of gpumem handles.
        errors = [line for line in result.stderr.splitlines() if line.startswith("gpumem: [error]")]
        self.assertEqual(len(errors), 1, result.describe())
        self.assertIn("has freed the block this handle exported", errors[0], result.describe())
        # The segment starts over the freed last block, 8 MiB of the last piece, and goes on over 40 MiB
        # grown past the preallocation: 20 granules lent, each a mapping of its own, none created. The
        # export names stretches of pieces, granules of one piece at consecutive offsets joined: the
        # last piece's 8 MiB, then the lent granules in 6 stretches of the pieces that lent them.
        exports = [(int(size), int(mappings)) for size, mappings in VMM_EXPORT.findall(result.stderr)]
        self.assertIn((48 * 2**20, 7), exports, result.describe())
        vmm = result.device(0)["vmm"]
        self.assertEqual(vmm["maps"] - vmm["creates"], 20, result.describe())
        self.assertEqual(vmm["peak_bytes"], 512 * 2**20, result.describe())

    def test_vmm_memory_the_driver_cannot_make_exportable_is_refused_cleanly(self):
        # The first cuMemCreate (asking for POSIX descriptors) is refused as unsupported: the arena
        # takes plain memory instead, and its blocks are refused for export in one line each.
        env = {**SIM, **CONFIGURATIONS["bfc preallocated"][1], "CUDASIM_FAULTS": "cuMemCreate@1=801",
               "GPUMEM_LOG_LEVEL": "info"}
        result = run([TENSOR, "producer"], env=env)
        self.assertSucceeded(result)
        self.assertEqual(key_values(result.stdout), {"export": "cudaErrorInvalidValue"}, result.describe())
        self.assertEqual(result.stderr.count("the driver refused memory exportable as POSIX descriptors"), 1,
                         result.describe())
        self.assertEqual(result.stderr.count("could not make exportable; it cannot be shared"), 1, result.describe())

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
                if name == "bfc classic preallocated" or name in ALWAYS_TOKENS:
                    self.assertTrue(is_token, handle)
                self.assertEqual(opened.stderr.count("has exited"), 1 if is_token else 0, opened.describe())

    def test_a_handle_stops_opening_when_the_exporters_context_goes(self):
        # Blocks that gpumem shares through its own means (pool, VMM mappings) are withdrawn with the
        # context, so the peer is told so in one line.
        for name in sorted(ALWAYS_TOKENS):
            with self.subTest(configuration=name):
                result = run([TENSOR, "export-and-reset"], env={**SIM, **CONFIGURATIONS[name][1]})
                self.assertSucceeded(result)
                self.assertEqual(key_values(result.stdout), {"open": "cudaErrorInvalidValue", "open_exit": "0"},
                                 result.describe())
                self.assertEqual(result.stderr.count("has freed the block this handle exported"), 1, result.describe())

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

    def test_a_close_waits_for_a_peer_device_still_reading(self):
        # The driver's close unmaps only once work queued on the mapping is done, on whichever device;
        # a pool block imported by gpumem (cuda_async) is freed, which must wait as long.
        for name, preload, env in configurations():
            with self.subTest(configuration=name):
                full_env = environment(preload, {**env, "CUDASIM_DEVICES": "2"})
                exporter = start_waiting_exporter(full_env)
                handle = key_values(exporter.stdout.readline())["handle"]
                reader = run([TENSOR, "peer-read", handle], env=full_env, preload=preload)
                exporter.stdin.close()
                self.assertEqual(exporter.wait(timeout=60), 0)
                exporter.stdout.close()
                self.assertSucceeded(reader)
                self.assertEqual(key_values(reader.stdout), {"peer_read": "ok"}, reader.describe())

    def test_an_importer_without_gpumem_gets_a_clean_error_for_a_pooled_block(self):
        # gpumem's handle of a block inside a region or of a pool is no driver handle: the driver
        # refuses it. An importer under gpumem opens it, whatever its own mode.
        for name in ["bfc classic preallocated", "bfc preallocated", "bfc growth", "cuda_async preallocated",
                     "cuda_async growth"]:
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


class ForgedHandles(IpcTestCase):
    """Everything an importer reads of another process (the handle, the descriptor it names, the export
    table, the slot) is untrusted: each forgery is refused with one line, never a hang or a crash."""

    def open_forged(self, handle: str, times: int = 1):
        result = run([TENSOR, "open", handle] + ([str(times)] if times > 1 else []), env=SIM, timeout=60)
        self.assertSucceeded(result)
        return result

    def assertRefusedInOneLine(self, result, reason: str):
        self.assertEqual(key_values(result.stdout), {"open": "cudaErrorInvalidValue"}, result.describe())
        lines = [line for line in result.stderr.splitlines() if line.startswith("gpumem:")]
        self.assertEqual(len(lines), 1, result.describe())
        self.assertIn(reason, lines[0], result.describe())

    def test_a_handle_naming_a_fifo_is_refused_without_blocking(self):
        # Opening a FIFO with no writer blocks: the importer must never open it.
        with tempfile.TemporaryDirectory(prefix="gpumem-ipc-") as tmp:
            fifo = os.path.join(tmp, "fifo")
            os.mkfifo(fifo)
            fifo_fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
            try:
                result = self.open_forged(forged_handle(1, 1, os.getpid(), fifo_fd, 0))
                self.assertRefusedInOneLine(result, f"descriptor {fifo_fd} is a FIFO")
                # A live slot of a genuine-looking table naming the FIFO as a pool's or a VMM piece's descriptor.
                table = forged_table(77)
                try:
                    pool_block = REGION_BLOCK.pack(b"", 0, 4096, fifo_fd, 0) + bytes(POOL_DATA)
                    write_live_slot(table, 3, 5, pool_block)
                    result = self.open_forged(forged_handle(77, 5, os.getpid(), table, 3))
                    self.assertRefusedInOneLine(result, f"descriptor {fifo_fd} is a FIFO")
                    vmm_block = (REGION_BLOCK.pack(b"", 0, 4096, -1, 0) + bytes(POOL_DATA) + VMM_SPAN.pack(0, 1, -1)
                                 + VMM_PIECE.pack(fifo_fd, 0, 2 << 20, 0))
                    write_live_slot(table, 4, 6, vmm_block)
                    result = self.open_forged(forged_handle(77, 6, os.getpid(), table, 4))
                    self.assertRefusedInOneLine(result, f"descriptor {fifo_fd} is a FIFO")
                finally:
                    os.close(table)
            finally:
                os.close(fifo_fd)

    def test_a_table_truncated_while_it_is_read_is_refused_without_a_crash(self):
        # The table shrinks and grows back again and again while the importer opens a handle of its
        # last slot: a mapped table would fault (SIGBUS) on the slot's page.
        table = forged_table(91)
        stop = threading.Event()

        def shrink_and_grow():
            while not stop.is_set():
                os.ftruncate(table, 4096)
                os.ftruncate(table, TABLE_BYTES)

        toggler = threading.Thread(target=shrink_and_grow)
        toggler.start()
        try:
            opens = 300
            result = self.open_forged(forged_handle(91, 1, os.getpid(), table, TABLE_SLOTS - 1), opens)
        finally:
            stop.set()
            toggler.join()
            os.close(table)
        out = key_values(result.stdout)
        self.assertEqual((out.get("open"), out.get("opens_refused")), ("cudaErrorInvalidValue", str(opens)),
                         result.describe())
        lines = [line for line in result.stderr.splitlines() if line.startswith("gpumem:")]
        self.assertEqual(len(lines), opens, result.describe())
        reasons = ("changed size while it was read", "is of another size", "has freed the block")
        for line in lines:
            self.assertTrue(any(reason in line for reason in reasons), line)

    def test_a_slot_placing_its_block_outside_its_memory_is_refused(self):
        # A genuine exporter's slot, copied into a forged table with the block moved past its memory.
        # The reason the importer's one line names (past its memory, the slot is plausible and the
        # driver refuses to map it).
        for name, past_the_end, reason in (("bfc classic preallocated", self.region_offset_past_the_end, "outside it"),
                                           ("bfc preallocated", self.vmm_offset_past_the_end, "impossibly"),
                                           ("bfc preallocated", self.vmm_piece_offset_overflowing, "impossibly"),
                                           ("bfc preallocated", self.vmm_piece_offset_past_its_memory,
                                            "refused to map")):
            with self.subTest(configuration=name, forgery=past_the_end.__name__):
                exporter = start_waiting_exporter(environment(True, CONFIGURATIONS[name][1]))
                try:
                    handle = key_values(exporter.stdout.readline())["handle"]
                    genuine = parse_handle(handle)
                    with open(f"/proc/{genuine['pid']}/fd/{genuine['table_fd']}", "rb") as source:
                        copied = bytearray(source.read())
                    self.assertEqual(len(copied), TABLE_BYTES)  # the layout above is the shim's
                    opened = past_the_end(copied, slot_offset(genuine["slot"]) + SLOT_HEADER.size, genuine["pid"])
                    table = os.memfd_create("gpumem-ipc-exports")
                    try:
                        os.write(table, copied)
                        forged = forged_handle(genuine["process_number"], genuine["generation"], os.getpid(), table,
                                               genuine["slot"])
                        env = {**SIM, **CONFIGURATIONS[name][1]}
                        result = run([TENSOR, "open", forged], env=env, timeout=60)
                        self.assertSucceeded(result)
                        self.assertRefusedInOneLine(result, reason)
                        # The genuine handle still opens: only the forgery was refused.
                        self.assertEqual(key_values(run([TENSOR, "open", handle], env=env).stdout),
                                         {"open": "cudaSuccess"})
                    finally:
                        os.close(table)
                        for fd in opened or ():
                            os.close(fd)
                finally:
                    exporter.stdin.close()
                    self.assertEqual(exporter.wait(timeout=60), 0)
                    exporter.stdout.close()

    @staticmethod
    def region_offset_past_the_end(table: bytearray, block_at: int, _exporter: int):
        region, offset, size, pool_fd, unused = REGION_BLOCK.unpack_from(table, block_at)
        REGION_BLOCK.pack_into(table, block_at, region, 1 << 40, size, pool_fd, unused)

    @staticmethod
    def vmm_offset_past_the_end(table: bytearray, block_at: int, _exporter: int):
        span_at = block_at + REGION_BLOCK.size + POOL_DATA
        _, count, list_fd = VMM_SPAN.unpack_from(table, span_at)
        total = sum(VMM_PIECE.unpack_from(table, span_at + VMM_SPAN.size + i * VMM_PIECE.size)[2] for i in range(count))
        VMM_SPAN.pack_into(table, span_at, total, count, list_fd)

    @staticmethod
    def vmm_piece_offset_overflowing(table: bytearray, block_at: int, _exporter: int):
        # The first piece's bytes said to begin where they would run past 2^64.
        piece_at = block_at + REGION_BLOCK.size + POOL_DATA + VMM_SPAN.size
        fd, unused, size, _ = VMM_PIECE.unpack_from(table, piece_at)
        VMM_PIECE.pack_into(table, piece_at, fd, unused, size, 2**64 - size + 1)

    @staticmethod
    def vmm_piece_offset_past_its_memory(table: bytearray, block_at: int, exporter: int):
        # The first piece's bytes said to begin 1 TiB into the memory its descriptor names: the
        # exporter's genuine piece, opened here, since the forged handle names this process.
        span_at = block_at + REGION_BLOCK.size + POOL_DATA
        count = VMM_SPAN.unpack_from(table, span_at)[1]
        opened = []
        for i in range(count):
            piece_at = span_at + VMM_SPAN.size + i * VMM_PIECE.size
            fd, unused, size, offset = VMM_PIECE.unpack_from(table, piece_at)
            opened.append(os.open(f"/proc/{exporter}/fd/{fd}", os.O_RDWR))
            VMM_PIECE.pack_into(table, piece_at, opened[-1], unused, size, 1 << 40 if i == 0 else offset)
        return opened

    def test_a_piece_naming_memory_the_driver_refuses_is_refused_in_one_line(self):
        # A VMM piece whose descriptor is /dev/null: no memory the driver can import.
        null_fd = os.open("/dev/null", os.O_RDWR)
        table = forged_table(79)
        try:
            vmm_block = (REGION_BLOCK.pack(b"", 0, 4096, -1, 0) + bytes(POOL_DATA) + VMM_SPAN.pack(0, 1, -1)
                         + VMM_PIECE.pack(null_fd, 0, 2 << 20, 0))
            write_live_slot(table, 2, 9, vmm_block)
            result = self.open_forged(forged_handle(79, 9, os.getpid(), table, 2))
            self.assertRefusedInOneLine(result, "refused piece 0")
        finally:
            os.close(table)
            os.close(null_fd)

    def test_a_forged_list_of_mappings_is_refused(self):
        # A block over more pieces than a slot holds names a list the exporter keeps: it must be a
        # sealed memfd of exactly the pieces' size, and the pieces in it must hold the block.
        count = INLINE_PIECES + 1
        pieces = b"".join(VMM_PIECE.pack(0, 0, 2 << 20, 0) for _ in range(count))
        with tempfile.TemporaryDirectory(prefix="gpumem-ipc-") as tmp:
            fifo = os.path.join(tmp, "fifo")
            os.mkfifo(fifo)
            fifo_fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
            unsealed = os.memfd_create("gpumem-ipc-pieces", os.MFD_ALLOW_SEALING)
            os.write(unsealed, pieces)
            short = os.memfd_create("gpumem-ipc-pieces", os.MFD_ALLOW_SEALING)
            os.write(short, pieces[:-VMM_PIECE.size])
            past = os.memfd_create("gpumem-ipc-pieces", os.MFD_ALLOW_SEALING)
            os.write(past, pieces)
            seals = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL
            for sealed in (short, past):
                fcntl.fcntl(sealed, fcntl.F_ADD_SEALS, seals)
            table = forged_table(78)
            try:
                for slot, (list_fd, offset, reason) in enumerate((
                        (fifo_fd, 0, f"descriptor {fifo_fd} is a FIFO"),
                        (unsealed, 0, "not a sealed memfd"),
                        (short, 0, f"not {count} mappings"),
                        (past, count * (2 << 20), "bytes at offset"),
                        (-1, 0, "no list of mappings"))):
                    with self.subTest(reason=reason):
                        block = (REGION_BLOCK.pack(b"", 0, 4096, -1, 0) + bytes(POOL_DATA)
                                 + VMM_SPAN.pack(offset, count, list_fd))
                        write_live_slot(table, slot, 9, block)
                        result = self.open_forged(forged_handle(78, 9, os.getpid(), table, slot))
                        self.assertRefusedInOneLine(result, reason)
            finally:
                for fd in (table, fifo_fd, unsealed, short, past):
                    os.close(fd)


if __name__ == "__main__":
    unittest.main()
