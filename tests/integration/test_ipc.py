"""Legacy CUDA IPC between processes (docs/ipc.md), in the shapes of three real users, each run over
the simulator without gpumem and with it in every mode: PyTorch's tensor at an offset in an exported
segment (ipc_tensor_share), vLLM's custom all-reduce across N ranks (ipc_all_reduce), NCCL's legacy
IPC probe (ipc_p2p_probe). Child processes inherit the environment, LD_PRELOAD included."""

import os
import queue
import re
import resource
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import unittest

from gpumem_testlib import TestCase, clean_environment, key_values, program_path, run, shim_path, sim_dir

TENSOR = program_path("ipc_tensor_share")
DESCRIPTORS = program_path("ipc_descriptors")
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
TABLE_MAGIC = b"gpumem-ipc-tabl7"
TABLE_HEADER = struct.Struct("<16sQII")  # magic, process number, slots, unused
SLOT_HEADER = struct.Struct("<QQQ")  # sequence, generation, live
SLOT_BYTES = SLOT_HEADER.size + 168  # then the ExportedBlock
TABLE_SLOTS = 4096
TABLE_BYTES = TABLE_HEADER.size + TABLE_SLOTS * SLOT_BYTES
# In an ExportedBlock: the region's handle (64 bytes), offset, size, pool descriptor, unused, the pool
# pointer's data (64 bytes), then the VMM span: the block's offset in its first stretch, the number of
# stretches, unused.
REGION_BLOCK = struct.Struct("<64sQQiI")
POOL_DATA = 64
VMM_SPAN = struct.Struct("<QII")
VMM_SPAN_AT = REGION_BLOCK.size + POOL_DATA  # in the ExportedBlock
# The descriptor protocol (shim/exports/descriptor_protocol.h): the service's abstract socket name,
# a request (magic, table number, generation, slot, first stretch, count, unused) and a reply (magic,
# status, driver error, first, count, then 16 stretches of size and offset), its descriptors attached.
SERVICE_NAME = "\0gpumem-ipc-{pid}-{number:016x}"
REQUEST = struct.Struct("<8sQQIIII")
REQUEST_MAGIC = b"gpumemQ1"
REPLY_HEADER = struct.Struct("<8sIiII")
REPLY_MAGIC = b"gpumemR1"
BATCH = 16
STRETCH = struct.Struct("<QQ")
REPLY_BYTES = REPLY_HEADER.size + BATCH * STRETCH.size
STATUS = {"ok": 0, "freed": 1, "bad_request": 2, "not_permitted": 3, "busy": 4, "refused": 5, "exiting": 6}


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


def vmm_slot(offset: int, count: int, size: int) -> bytes:
    """An ExportedBlock of a VMM block of `size` bytes at `offset` in `count` stretches."""
    return REGION_BLOCK.pack(b"", 0, size, -1, 0) + bytes(POOL_DATA) + VMM_SPAN.pack(offset, count, 0)


def reply_bytes(status: str = "ok", first: int = 0, stretches=(), count=None, driver_error: int = 0) -> bytes:
    """A descriptor service's reply: `stretches` are (size, offset) pairs."""
    body = b"".join(STRETCH.pack(size, offset) for size, offset in stretches).ljust(BATCH * STRETCH.size, b"\0")
    return REPLY_HEADER.pack(REPLY_MAGIC, STATUS[status], driver_error, first,
                             len(stretches) if count is None else count) + body


def parse_reply(data: bytes) -> dict:
    magic, status, driver_error, first, count = REPLY_HEADER.unpack_from(data)
    stretches = [STRETCH.unpack_from(data, REPLY_HEADER.size + i * STRETCH.size) for i in range(min(count, BATCH))]
    return {"magic": magic, "status": status, "driver_error": driver_error, "first": first, "count": count,
            "stretches": stretches}


def descriptor_count(pid: int) -> int:
    """Process `pid`'s open descriptors, less those its background threads hold for an instant while
    they look at which threads are left (/proc/<pid>/task and its threads' stat files)."""
    count = 0
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:  # closed meanwhile
            continue
        if not target.startswith(f"/proc/{pid}/task"):
            count += 1
    return count


def descriptor_targets(pid: int) -> list:
    """What each of process `pid`'s descriptors refers to, for a failure's message."""
    targets = []
    for name in sorted(os.listdir(f"/proc/{pid}/fd"), key=int):
        try:
            targets.append(f"{name} -> {os.readlink(f'/proc/{pid}/fd/{name}')}")
        except OSError:  # closed meanwhile
            pass
    return targets


def limit_leaving(pid: int, room: int) -> int:
    """The descriptor limit (ulimit -n) that leaves process `pid` exactly `room` free descriptor numbers."""
    taken = {int(fd) for fd in os.listdir(f"/proc/{pid}/fd")}
    free = 0
    for number in range(1 << 20):
        if number not in taken:
            if free == room:
                return number
            free += 1
    raise AssertionError("no such limit")


def socket_inodes(pid: int) -> set:
    """The sockets process `pid` holds, by inode."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target)
    return inodes


class ServiceClient:
    """Talks to a genuine exporter's descriptor service as an importer would, or as a hostile one."""

    def __init__(self, handle: str):
        self.token = parse_handle(handle)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.settimeout(10)
        self.sock.connect(SERVICE_NAME.format(pid=self.token["pid"], number=self.token["process_number"]))

    def ask(self, first: int, count: int, **changes) -> tuple:
        """Sends a request (`changes` override its fields) and returns (reply, descriptors)."""
        fields = {"magic": REQUEST_MAGIC, "number": self.token["process_number"],
                  "generation": self.token["generation"], "slot": self.token["slot"], "first": first,
                  "count": count}
        fields.update(changes)
        self.sock.send(REQUEST.pack(fields["magic"], fields["number"], fields["generation"], fields["slot"],
                                    fields["first"], fields["count"], 0))
        return self.receive()

    def receive(self) -> tuple:
        data, fds, _flags, _address = socket.recv_fds(self.sock, REPLY_BYTES + 1, BATCH + 4)
        return (parse_reply(data) if len(data) == REPLY_BYTES else {"bytes": len(data)}), fds

    def close(self):
        self.sock.close()


class ForgedService:
    """A descriptor service in this process's name for the forged table `number`, answering each
    request with what answer(request) returns: (reply bytes, descriptors to attach), None for no
    answer at all, or HANG_UP to close the connection. Its descriptors are closed once sent."""

    HANG_UP = "hang up"

    def __init__(self, number: int, answer):
        self.answer = answer
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(SERVICE_NAME.format(pid=os.getpid(), number=number))
        self.listener.listen(8)
        self.listener.settimeout(0.05)  # the accepting thread sees close() soon, and lets the name go
        self.closed = threading.Event()
        self.connections = []
        self.acceptor = threading.Thread(target=self._accept, daemon=True)
        self.acceptor.start()

    def _accept(self):
        while not self.closed.is_set():
            try:
                connection, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            connection.settimeout(None)
            self.connections.append(connection)
            threading.Thread(target=self._talk, args=(connection,), daemon=True).start()

    def _talk(self, connection):
        while True:
            try:
                data = connection.recv(REQUEST.size + 1)
            except OSError:
                return
            if not data:
                return
            names = ("magic", "number", "generation", "slot", "first", "count", "unused")
            answered = self.answer(dict(zip(names, REQUEST.unpack(data))))
            if answered is None:
                continue
            if answered == ForgedService.HANG_UP:
                connection.shutdown(socket.SHUT_RDWR)
                return
            payload, fds = answered
            try:
                if fds:
                    socket.send_fds(connection, [payload], fds)
                else:
                    connection.send(payload)
            except OSError:
                return
            finally:
                for fd in fds:
                    os.close(fd)

    def close(self):
        self.closed.set()
        self.acceptor.join()
        self.listener.close()
        for connection in self.connections:
            connection.close()


class Driven:
    """One role of ipc_descriptors, driven a command at a time, its descriptors limited to `nofile`
    (ulimit -n, set in the child before it runs) and its stderr kept in a file."""

    def __init__(self, role: str, env: dict, nofile: int = 1024):
        self.stderr_file = tempfile.TemporaryFile(mode="w+")
        self.read_to = 0

        def limit():
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.proc = subprocess.Popen([DESCRIPTORS, role], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr_file, text=True, preexec_fn=limit)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, command: str):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def answer(self, timeout: float = 120) -> dict:
        line = self.lines.get(timeout=timeout)
        if line is None:
            raise AssertionError(f"{self.proc.args} ended: {self.stderr()}")
        return key_values(line)

    def ask(self, command: str, answers: int = 1, timeout: float = 120) -> dict:
        self.send(command)
        out = {}
        for _ in range(answers):
            out.update(self.answer(timeout))
        return out

    def descriptors(self) -> int:
        return descriptor_count(self.pid)

    def stderr(self) -> str:
        self.stderr_file.seek(0)
        return self.stderr_file.read()

    def new_stderr(self) -> str:
        """What it wrote on stderr since the last call."""
        text = self.stderr()
        fresh, self.read_to = text[self.read_to:], len(text)
        return fresh

    def finish(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            try:
                self.send("quit")
            except OSError:
                pass
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass  # a command it never read: nothing more to send

    def kill(self):
        """The end of a test (a cleanup): kills it if it still runs, and lets its stderr go."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.finish()
        self.stderr_file.close()


def environment(preload: bool, env: dict) -> dict:
    full = clean_environment()
    full.update(SIM)
    full["LD_LIBRARY_PATH"] = sim_dir()
    if preload:
        full["LD_PRELOAD"] = shim_path()
    full.update(env)
    return full


def share_with_a_heavier_member(test: unittest.TestCase) -> dict:
    """A sharing directory of its own (removed after `test`) that another process of weight 1 has
    joined (holding 2 MiB until the test ends); the environment to share it. A member of weight 0.1
    then has a guarantee of about a tenth of the device, and maps what it takes beyond it a 2 MiB
    granule per piece."""
    share_dir = tempfile.mkdtemp(prefix="gpumem-ipc-share-")
    test.addCleanup(lambda: subprocess.run(["rm", "-rf", share_dir], check=False))
    shared = {"GPUMEM_SHARE": "auto", "GPUMEM_SHARE_DIR": share_dir}
    joined, done = os.path.join(share_dir, "joined"), os.path.join(share_dir, "done")
    other_env = clean_environment()
    other_env.update({**SIM, **shared, "LD_PRELOAD": shim_path(), "LD_LIBRARY_PATH": sim_dir(),
                      "GPUMEM_PREALLOCATE": "false"})
    other = subprocess.Popen([program_path("share_worker"), "alloc:2x1", f"touch:{joined}", f"wait:{done}"],
                             env=other_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    test.addCleanup(other.wait, 60)
    test.addCleanup(lambda: open(done, "w").close())
    for _ in range(600):
        if os.path.exists(joined) or other.poll() is not None:
            break
        threading.Event().wait(0.05)
    test.assertTrue(os.path.exists(joined), "the other member did not join")
    return shared


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

    def test_a_segment_over_hundreds_of_mappings(self):
        # A shared GPU's arena takes memory beyond its guarantee a granule per piece: with a second
        # member of ten times its weight, the producer's guarantee is about 370 MiB, so its 1.1 GiB
        # segment lies over more than 512 pieces, which the consumer asks the exporter's descriptor
        # service for a batch at a time, and opens as any other.
        shared = share_with_a_heavier_member(self)
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
        self.assertGreater(max(mappings for _, mappings in exports), 512, result.describe())

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
                readers = [run([TENSOR, role, handle], env=full_env, preload=preload)
                           for role in ("peer-read", "peer-read-capturing")]
                exporter.stdin.close()
                self.assertEqual(exporter.wait(timeout=60), 0)
                exporter.stdout.close()
                # The second closes while a graph is captured: a pool import's free, which would need a
                # context synchronisation, waits for a later close outside the capture.
                for reader in readers:
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


# A shared GPU's arena maps its memory a 2 MiB granule per piece: this block lies over 1,050 of them.
LARGE_BLOCK = 2100 * 2**20
PIECE_LINE = re.compile(r"the %d-byte block at 0x[0-9a-f]+ is shared as (\d+) VMM mapping" % LARGE_BLOCK)


class DescriptorBound(IpcTestCase):
    """A VMM block over more than a thousand pieces is shared without either process holding a
    descriptor per piece (docs/ipc.md, "The descriptor service"): under ulimit -n 64 and 1024, every
    process's descriptors back to what they were once the block is closed and freed, failures leaving
    them as they were, a stopped importer holding nothing up."""

    def shared_environment(self, **more) -> dict:
        # Weight 0.01 beside a member of weight 1: a guarantee of a few MiB, and the block beyond it.
        return environment(True, {**SIM, "GPUMEM_LIMIT": "3GiB", "GPUMEM_PREALLOCATE": "false",
                                  "GPUMEM_SHARE_WEIGHT": "0.01", **share_with_a_heavier_member(self), **more})

    def start(self, role: str, env: dict, nofile: int) -> Driven:
        process = Driven(role, env, nofile)
        self.addCleanup(process.kill)
        self.assertEqual(process.ask("init"), {"init": "ok"})
        return process

    def exporter_with_large_block(self, env: dict, nofile: int) -> tuple:
        """An exporter holding the large block (0) and a small one (1) already exported: the table and
        the descriptor service, which stay, exist. Returns it and its descriptors then."""
        exporter = self.start("exporter", {**env, "GPUMEM_LOG_LEVEL": "debug"}, nofile)
        self.assertEqual(exporter.ask(f"alloc {LARGE_BLOCK}"), {"block": "0"})
        self.assertEqual(exporter.ask("alloc 1048576"), {"block": "1"})
        before_first_export = exporter.descriptors()
        self.assertIn("handle", exporter.ask("export 1"))
        # A process that exports keeps two descriptors from then on: its table and its service's socket.
        self.assertEqual(exporter.descriptors(), before_first_export + 2)
        return exporter, exporter.descriptors()

    def assertDescriptorsReturn(self, process: Driven, expected: int, within: float = 60):
        """The service closes a finished connection when it sees the end: wait for it (on a loaded machine
        a peer's batch of exports may take seconds; the wait ends as soon as the count is back)."""
        deadline = time.monotonic() + within
        while process.descriptors() != expected and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(process.descriptors(), expected, descriptor_targets(process.pid))

    def exchange_under(self, nofile: int):
        env = self.shared_environment()
        exporter, exporter_before = self.exporter_with_large_block(env, nofile)
        importer = self.start("importer", env, nofile)
        importer_before = importer.descriptors()
        handle = exporter.ask("export 0")["handle"]
        self.assertEqual(exporter.descriptors(), exporter_before)  # no descriptor kept per piece
        self.assertEqual(importer.ask(f"open {handle} 0 {LARGE_BLOCK}", answers=2),
                         {"open": "cudaSuccess", "data": "ok"})
        self.assertEqual(importer.descriptors(), importer_before)  # each one closed once imported
        self.assertDescriptorsReturn(exporter, exporter_before)
        self.assertEqual(importer.ask("close"), {"close": "cudaSuccess"})
        self.assertEqual(importer.descriptors(), importer_before)
        self.assertEqual(exporter.ask("free 0"), {"free": "cudaSuccess"})
        self.assertEqual(exporter.descriptors(), exporter_before)
        self.assertEqual(importer.finish(), 0, importer.stderr())
        self.assertEqual(exporter.finish(), 0, exporter.stderr())
        pieces = [int(count) for count in PIECE_LINE.findall(exporter.stderr())]
        self.assertEqual(len(pieces), 1, exporter.stderr())
        self.assertGreaterEqual(pieces[0], 1000)
        self.assertNotIn("gpumem: [error]", exporter.stderr() + importer.stderr())

    def test_gpumem_keeps_no_more_descriptors_than_the_driver_alone(self):
        # The same exchange without gpumem (one cudaMalloc block, the driver's own legacy IPC), and with
        # it, counted from the block's allocation on: after the export the exporter holds at most what
        # it holds without gpumem plus its table and listening socket, which stay; the importer holds
        # no more than without gpumem while the block is open, and nothing once it is closed.
        held = {}
        for preload in (False, True):
            env = self.shared_environment() if preload else environment(False, SIM)
            exporter = self.start("exporter", env, 64)
            importer = self.start("importer", env, 64)
            self.assertEqual(exporter.ask(f"alloc {LARGE_BLOCK}"), {"block": "0"})
            start = (exporter.descriptors(), importer.descriptors())
            handle = exporter.ask("export 0")["handle"]
            exported = exporter.descriptors() - start[0]
            self.assertEqual(importer.ask(f"open {handle} 0 {LARGE_BLOCK}", answers=2),
                             {"open": "cudaSuccess", "data": "ok"})
            opened = importer.descriptors() - start[1]
            self.assertEqual(importer.ask("close"), {"close": "cudaSuccess"})
            self.assertEqual(exporter.ask("free 0"), {"free": "cudaSuccess"})
            time.sleep(0.2)  # the service sees the importer's connection end
            held[preload] = (exported, opened, exporter.descriptors() - start[0], importer.descriptors() - start[1])
            self.assertEqual(importer.finish(), 0, importer.stderr())
            self.assertEqual(exporter.finish(), 0, exporter.stderr())
        (plain_exported, plain_opened, _, plain_importer_after) = held[False]
        (exported, opened, after, importer_after) = held[True]
        self.assertLessEqual(exported, plain_exported + 2, held)
        self.assertLessEqual(opened, plain_opened, held)
        self.assertLessEqual(after, exported, held)
        self.assertLessEqual(importer_after, max(plain_importer_after, 0), held)

    def test_a_block_over_a_thousand_pieces_under_64_descriptors(self):
        self.exchange_under(64)

    def test_a_block_over_a_thousand_pieces_under_1024_descriptors(self):
        self.exchange_under(1024)

    def test_an_exporter_short_of_descriptors_fails_and_keeps_nothing(self):
        # An exporter left 0 to 3 free descriptors: its first export of the large block fails (no room
        # for the table, the listening socket, or the driver's export of a piece) with one error line,
        # and it holds what it held before; with its limit back, the export works and opens.
        env = self.shared_environment()
        exporter = self.start("exporter", env, 64)
        self.assertEqual(exporter.ask(f"alloc {LARGE_BLOCK}"), {"block": "0"})
        exporter.new_stderr()
        before = exporter.descriptors()
        for room in range(4):
            with self.subTest(free_descriptors=room):
                resource.prlimit(exporter.pid, resource.RLIMIT_NOFILE, (limit_leaving(exporter.pid, room), 64))
                answer = exporter.ask("export 0")
                resource.prlimit(exporter.pid, resource.RLIMIT_NOFILE, (64, 64))
                if "handle" in answer:
                    break  # room enough: the export below is the one checked
                self.assertIn(answer.get("export"), ("cudaErrorOperatingSystem", "cudaErrorInvalidValue",
                                                     "cudaErrorMemoryAllocation"), answer)
                lines = [line for line in exporter.new_stderr().splitlines() if line.startswith("gpumem:")]
                self.assertEqual(len(lines), 1, lines)
                self.assertIn("cuIpcGetMemHandle", lines[0])
                self.assertEqual(exporter.descriptors(), before, descriptor_targets(exporter.pid))
        handle = exporter.ask("export 0")["handle"]
        importer = self.start("importer", env, 64)
        self.assertEqual(importer.ask(f"open {handle} 0 {LARGE_BLOCK}", answers=2),
                         {"open": "cudaSuccess", "data": "ok"})
        self.assertEqual(importer.ask("close"), {"close": "cudaSuccess"})
        self.assertDescriptorsReturn(exporter, before + 2)  # the table and the service's socket

    def test_an_importer_short_of_descriptors_takes_smaller_batches(self):
        # Room for the socket and a few descriptors only: the importer asks for fewer at a time.
        env = self.shared_environment()
        exporter, exporter_before = self.exporter_with_large_block(env, 64)
        importer = self.start("importer", env, 64)
        importer_before = importer.descriptors()
        handle = exporter.ask("export 0")["handle"]
        resource.prlimit(importer.pid, resource.RLIMIT_NOFILE, (importer_before + 6, importer_before + 6))
        self.assertEqual(importer.ask(f"open {handle} 0 {LARGE_BLOCK}", answers=2),
                         {"open": "cudaSuccess", "data": "ok"})
        self.assertEqual(importer.ask("close"), {"close": "cudaSuccess"})
        self.assertEqual(importer.descriptors(), importer_before)
        self.assertDescriptorsReturn(exporter, exporter_before)
        self.assertNotIn("gpumem: [error]", importer.stderr())

    def test_failures_leave_both_processes_as_they_were(self):
        env = self.shared_environment()
        exporter, exporter_before = self.exporter_with_large_block(env, 64)
        handle = exporter.ask("export 0")["handle"]
        with self.subTest(failure="the importer's driver refuses a mapping"):
            # Every piece fetched and imported, then the 500th mapping refused: all of it undone.
            importer = self.start("importer", {**env, "CUDASIM_FAULTS": "cuMemMap@500=2"}, 64)
            importer_before = importer.descriptors()
            self.assertEqual(importer.ask(f"open {handle} 0 {LARGE_BLOCK}"), {"open": "cudaErrorMemoryAllocation"})
            self.assertEqual(importer.descriptors(), importer_before)
            self.assertDescriptorsReturn(exporter, exporter_before)
            # Nothing was left behind: the same handle opens in the same process.
            self.assertEqual(importer.ask(f"open {handle} 0 {LARGE_BLOCK}", answers=2),
                             {"open": "cudaSuccess", "data": "ok"})
            self.assertEqual(importer.ask("close"), {"close": "cudaSuccess"})
            self.assertEqual(importer.descriptors(), importer_before)
        with self.subTest(failure="a peer of another user"):
            # Refused by the service (SO_PEERCRED), whatever it asks: no descriptor sent or kept.
            read_end, write_end = os.pipe()
            child = os.fork()
            if child == 0:
                try:
                    os.close(read_end)
                    os.setgid(65534)
                    os.setuid(65534)
                    client = ServiceClient(handle)
                    try:
                        client.ask(0, BATCH)
                    except OSError:
                        pass  # the service said why and closed the connection before the request went
                    reply, fds = client.receive()
                    os.write(write_end, f"{reply.get('status')} {len(fds)}".encode())
                finally:
                    os._exit(0)
            os.close(write_end)
            answer = os.read(read_end, 64).decode()
            os.close(read_end)
            os.waitpid(child, 0)
            self.assertEqual(answer, f"{STATUS['not_permitted']} 0")
            self.assertDescriptorsReturn(exporter, exporter_before)
        with self.subTest(failure="the block freed while an importer is fetching it"):
            client = ServiceClient(handle)
            reply, fds = client.ask(0, BATCH)
            self.assertEqual((reply["status"], reply["count"], len(fds)), (STATUS["ok"], BATCH, BATCH))
            for fd in fds:
                os.close(fd)
            # The exporter sent those and closes its own: it holds the connection and nothing else.
            self.assertDescriptorsReturn(exporter, exporter_before + 1)
            self.assertEqual(exporter.ask("free 0"), {"free": "cudaSuccess"})
            reply, fds = client.ask(BATCH, BATCH)
            self.assertEqual((reply["status"], len(fds)), (STATUS["freed"], 0))
            client.close()
            self.assertDescriptorsReturn(exporter, exporter_before)
        self.assertEqual(exporter.finish(), 0, exporter.stderr())

    def test_a_hostile_client_gets_nothing_and_the_exporter_keeps_nothing(self):
        env = self.shared_environment()
        exporter, exporter_before = self.exporter_with_large_block(env, 64)
        handle = exporter.ask("export 0")["handle"]
        token = parse_handle(handle)
        name = SERVICE_NAME.format(pid=token["pid"], number=token["process_number"])
        null_fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(8)]
        try:
            for what, message, fds in (
                    ("too many stretches at once", REQUEST.pack(REQUEST_MAGIC, token["process_number"],
                                                                token["generation"], token["slot"], 0, BATCH + 1, 0),
                     []),
                    ("no stretch", REQUEST.pack(REQUEST_MAGIC, token["process_number"], token["generation"],
                                                token["slot"], 0, 0, 0), []),
                    ("stretches past the block", REQUEST.pack(REQUEST_MAGIC, token["process_number"],
                                                              token["generation"], token["slot"], 1 << 20, 1, 0), []),
                    ("another table", REQUEST.pack(REQUEST_MAGIC, token["process_number"] ^ 1, token["generation"],
                                                   token["slot"], 0, 1, 0), []),
                    ("a slot out of range", REQUEST.pack(REQUEST_MAGIC, token["process_number"], token["generation"],
                                                         1 << 31, 0, 1, 0), []),
                    ("another protocol", b"GET / HTTP/1.0\r\n\r\n".ljust(REQUEST.size, b" "), []),
                    ("a short request", REQUEST_MAGIC, []),
                    ("a long request", b"\0" * 65536, []),
                    ("descriptors sent to the exporter", REQUEST.pack(REQUEST_MAGIC, token["process_number"],
                                                                      token["generation"], token["slot"], 0, 1, 0),
                     null_fds)):
                with self.subTest(request=what):
                    client = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                    client.settimeout(10)
                    client.connect(name)
                    if fds:
                        socket.send_fds(client, [message], fds)
                    else:
                        client.send(message)
                    data, received, _flags, _address = socket.recv_fds(client, REPLY_BYTES + 1, BATCH + 4)
                    for fd in received:
                        os.close(fd)
                    # Refused, and let go; descriptors a client attaches never reach the exporter.
                    self.assertEqual((parse_reply(data)["status"], len(received)), (STATUS["bad_request"], 0))
                    self.assertEqual(client.recv(REPLY_BYTES + 1), b"")
                    client.close()
                    self.assertDescriptorsReturn(exporter, exporter_before)
            # Still serving.
            importer = self.start("importer", env, 64)
            self.assertEqual(importer.ask(f"open {handle} 0 {LARGE_BLOCK}", answers=2),
                             {"open": "cudaSuccess", "data": "ok"})
        finally:
            for fd in null_fds:
                os.close(fd)

    def test_a_stopped_importer_holds_up_neither_the_exporter_nor_other_importers(self):
        env = self.shared_environment()
        exporter, exporter_before = self.exporter_with_large_block(env, 64)
        handle = exporter.ask("export 0")["handle"]
        unhindered = int(exporter.ask("churn 400")["churn_ms"])
        # A peer that asked and never reads, and an importer stopped somewhere in its import.
        silent = ServiceClient(handle)
        silent.sock.send(REQUEST.pack(REQUEST_MAGIC, silent.token["process_number"], silent.token["generation"],
                                      silent.token["slot"], 0, BATCH, 0))
        stopped = self.start("importer", env, 64)
        stopped_before = stopped.descriptors()
        stopped.send(f"open {handle} 0 {LARGE_BLOCK}")
        time.sleep(0.05)
        os.kill(stopped.pid, signal.SIGSTOP)
        try:
            churned = int(exporter.ask("churn 400", timeout=30)["churn_ms"])
            self.assertLess(churned, max(5 * unhindered, 3000))
            other = self.start("importer", env, 64)
            self.assertEqual(other.ask(f"open {handle} 0 {LARGE_BLOCK}", answers=2, timeout=30),
                             {"open": "cudaSuccess", "data": "ok"})
            self.assertEqual(other.ask("close"), {"close": "cudaSuccess"})
            # The service lets idle connections go after 5 s: the exporter is back to what it held.
            self.assertDescriptorsReturn(exporter, exporter_before, within=15)
        finally:
            os.kill(stopped.pid, signal.SIGCONT)
        silent.close()
        # Its import either finished before it was stopped or fails cleanly now (its connection was
        # closed meanwhile); either way it holds what it held before, once closed.
        opened = stopped.answer(timeout=30)
        if opened == {"open": "cudaSuccess"}:
            self.assertEqual(stopped.answer(), {"data": "ok"})
            self.assertEqual(stopped.ask("close"), {"close": "cudaSuccess"})
        else:
            self.assertEqual(opened, {"open": "cudaErrorInvalidValue"})
            self.assertIn("closed the connection", stopped.stderr())
        self.assertEqual(stopped.descriptors(), stopped_before)
        self.assertEqual(exporter.ask("free 0"), {"free": "cudaSuccess"})
        self.assertDescriptorsReturn(exporter, exporter_before)

    def test_a_connection_broken_mid_transfer_leaves_both_processes_as_they_were(self):
        # The importer's connection fails after it imported the first batch of a block's pieces: the
        # service hangs up, cuts its reply short, or sends fewer descriptors than stretches. A relay in
        # this process's name (a forged handle whose table slot is a copy of the genuine one) forwards
        # the genuine exporter's first reply, its descriptors too, then fails as told. The open fails
        # in one line, the pieces already imported are given back, every descriptor received is
        # closed: the importer holds what it held before (under ulimit -n 64), the exporter too, and
        # the genuine handle then opens in the same process.
        env = self.shared_environment()
        exporter, exporter_before = self.exporter_with_large_block(env, 64)
        handle = exporter.ask("export 0")["handle"]
        token = parse_handle(handle)
        genuine_table = os.open(f"/proc/{token['pid']}/fd/{token['table_fd']}", os.O_RDONLY)
        try:
            genuine_slot = os.pread(genuine_table, SLOT_BYTES, slot_offset(token["slot"]))
        finally:
            os.close(genuine_table)
        table = forged_table(82)
        write_live_slot(table, 0, 5, genuine_slot[SLOT_HEADER.size:])
        forged = forged_handle(82, 5, os.getpid(), table, 0)

        def relay(failure):
            client = ServiceClient(handle)
            self.addCleanup(client.close)

            def answer(request):
                client.sock.send(REQUEST.pack(REQUEST_MAGIC, token["process_number"], token["generation"],
                                              token["slot"], request["first"], request["count"], 0))
                data, fds, _flags, _address = socket.recv_fds(client.sock, REPLY_BYTES + 1, BATCH + 4)
                if request["first"] == 0:
                    return data, fds
                if failure == "hangs up":
                    for fd in fds:
                        os.close(fd)
                    return ForgedService.HANG_UP
                if failure == "cuts its reply short":
                    return data[:REPLY_HEADER.size], fds
                for fd in fds[len(fds) // 2:]:  # "sends half the descriptors"
                    os.close(fd)
                return data, fds[:len(fds) // 2]
            return client, answer

        importer = self.start("importer", env, 64)
        importer.new_stderr()
        importer_before = importer.descriptors()
        try:
            for failure, reason in (("hangs up", "closed the connection"),
                                    ("cuts its reply short", "impossible reply"),
                                    ("sends half the descriptors", "sent 8 descriptors")):
                with self.subTest(failure=failure):
                    client, answer = relay(failure)
                    service = ForgedService(82, answer)
                    try:
                        self.assertEqual(importer.ask(f"open {forged} 0 {LARGE_BLOCK}", timeout=60),
                                         {"open": "cudaErrorInvalidValue"})
                    finally:
                        service.close()
                        client.close()
                    lines = [line for line in importer.new_stderr().splitlines() if line.startswith("gpumem:")]
                    self.assertEqual(len(lines), 1, lines)
                    self.assertIn(reason, lines[0])
                    self.assertEqual(importer.descriptors(), importer_before)
                    self.assertDescriptorsReturn(exporter, exporter_before)
        finally:
            os.close(table)
        # Nothing of the failed imports was left behind: the genuine handle opens, and closes clean.
        self.assertEqual(importer.ask(f"open {handle} 0 {LARGE_BLOCK}", answers=2),
                         {"open": "cudaSuccess", "data": "ok"})
        self.assertEqual(importer.ask("close"), {"close": "cudaSuccess"})
        self.assertEqual(importer.descriptors(), importer_before)
        self.assertDescriptorsReturn(exporter, exporter_before)

    def test_an_exporter_whose_replies_cannot_be_sent_keeps_nothing(self):
        # The exporter's service fails to send: a peer that closes its end right after its request,
        # and one that asks for batch after batch without reading any (its replies pile up until the
        # kernel refuses more descriptors in flight under ulimit -n 64, or the peer's queue is full).
        # The exporter closes the descriptors it made for each reply not sent and lets the peer go:
        # it holds what it held before, and still serves.
        env = self.shared_environment()
        exporter, exporter_before = self.exporter_with_large_block(env, 64)
        handle = exporter.ask("export 0")["handle"]
        with self.subTest(peer="closes right after its request"):
            for _ in range(5):
                client = ServiceClient(handle)
                client.sock.send(REQUEST.pack(REQUEST_MAGIC, client.token["process_number"],
                                              client.token["generation"], client.token["slot"], 0, BATCH, 0))
                client.close()
            self.assertDescriptorsReturn(exporter, exporter_before)
        with self.subTest(peer="never reads its replies"):
            client = ServiceClient(handle)
            request = REQUEST.pack(REQUEST_MAGIC, client.token["process_number"], client.token["generation"],
                                   client.token["slot"], 0, BATCH, 0)
            sent = 0
            while sent < 20000:
                try:
                    client.sock.send(request)
                except OSError:
                    break  # the service let the connection go
                sent += 1
            # The service let it go once a reply could not be sent (or, at the latest, once idle for 5 s).
            self.assertDescriptorsReturn(exporter, exporter_before, within=15)
            answered = 0
            while True:
                try:
                    data, fds, _flags, _address = socket.recv_fds(client.sock, REPLY_BYTES + 1, BATCH + 4)
                except OSError:
                    break
                for fd in fds:
                    os.close(fd)
                if not data:
                    break
                answered += 1
            client.close()
            self.assertGreater(answered, 0)
            self.assertLess(answered, sent)  # a reply could not be sent: the rest were never answered
        importer = self.start("importer", env, 64)
        self.assertEqual(importer.ask(f"open {handle} 0 {LARGE_BLOCK}", answers=2),
                         {"open": "cudaSuccess", "data": "ok"})
        self.assertEqual(importer.ask("close"), {"close": "cudaSuccess"})
        self.assertDescriptorsReturn(exporter, exporter_before)

    def test_a_forked_child_exports_in_its_own_name(self):
        # The child of an exporter whose service runs holds none of its parent's sockets; its export
        # names it, and its own service hands out its memory.
        env = self.shared_environment()
        exporter, _ = self.exporter_with_large_block(env, 64)
        parent_sockets = socket_inodes(exporter.pid)
        forked = exporter.ask(f"fork-export {64 * 2**20}", answers=2)
        self.assertIn("child_handle", forked, exporter.stderr())
        child = int(forked["child"])
        self.assertEqual(parse_handle(forked["child_handle"])["pid"], child)
        self.assertFalse(parent_sockets & socket_inodes(child))
        importer = self.start("importer", env, 64)
        self.assertEqual(importer.ask(f"open {forked['child_handle']} 1000 {64 * 2**20}", answers=2),
                         {"open": "cudaSuccess", "data": "ok"})
        self.assertEqual(importer.ask("close"), {"close": "cudaSuccess"})
        self.assertEqual(exporter.ask("fork-end"), {"child_exit": "0"})

    def test_an_exporter_ends_when_its_last_thread_does(self):
        # The descriptor service's thread never keeps a process alive whose own threads all ended. The
        # blocks are left unmarked: a stream's worker thread (the simulator's) would keep it alive.
        exporter = self.start("exporter", self.shared_environment(), 64)
        self.assertEqual(exporter.ask(f"alloc {LARGE_BLOCK} nomark"), {"block": "0"})
        self.assertIn("handle", exporter.ask("export 0"))
        # The main thread, the descriptor service's and the reclaim thread of the shared device.
        tasks = [task for task in os.listdir(f"/proc/{exporter.pid}/task") if int(task) != exporter.pid]
        self.assertEqual(sorted(thread_name(exporter.pid, task) for task in tasks), ["gpumem-ipc", "gpumem-reclaim"])
        self.assertEqual(exporter.ask("pthread-exit"), {"bye": "1"})
        self.assertEqual(exporter.proc.wait(timeout=10), 0)


def thread_name(pid: int, task: str) -> str:
    with open(f"/proc/{pid}/task/{task}/comm") as f:
        return f.read().strip()


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
                # A live slot of a genuine-looking table naming the FIFO as a pool's descriptor, and a
                # descriptor service sending it as a VMM piece's.
                table = forged_table(77)
                service = ForgedService(77, lambda request: (
                    reply_bytes(first=request["first"], stretches=[(2 << 20, 0)]), [os.dup(fifo_fd)]))
                try:
                    pool_block = REGION_BLOCK.pack(b"", 0, 4096, fifo_fd, 0) + bytes(POOL_DATA)
                    write_live_slot(table, 3, 5, pool_block)
                    result = self.open_forged(forged_handle(77, 5, os.getpid(), table, 3))
                    self.assertRefusedInOneLine(result, f"descriptor {fifo_fd} is a FIFO")
                    write_live_slot(table, 4, 6, vmm_slot(0, 1, 4096))
                    result = self.open_forged(forged_handle(77, 6, os.getpid(), table, 4))
                    self.assertRefusedInOneLine(result, "for piece 0 is a FIFO")
                finally:
                    service.close()
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

    def genuine_table_copy(self, exporter: subprocess.Popen) -> tuple:
        """The genuine handle of a waiting exporter, and a copy of its export table."""
        handle = key_values(exporter.stdout.readline())["handle"]
        genuine = parse_handle(handle)
        with open(f"/proc/{genuine['pid']}/fd/{genuine['table_fd']}", "rb") as source:
            copied = bytearray(source.read())
        self.assertEqual(len(copied), TABLE_BYTES)  # the layout above is the shim's
        return handle, genuine, copied

    def test_a_slot_placing_its_block_outside_its_region_is_refused(self):
        # A genuine exporter's slot, copied into a forged table with the block moved past its region.
        name = "bfc classic preallocated"
        exporter = start_waiting_exporter(environment(True, CONFIGURATIONS[name][1]))
        try:
            handle, genuine, copied = self.genuine_table_copy(exporter)
            block_at = slot_offset(genuine["slot"]) + SLOT_HEADER.size
            region, offset, size, pool_fd, unused = REGION_BLOCK.unpack_from(copied, block_at)
            REGION_BLOCK.pack_into(copied, block_at, region, 1 << 40, size, pool_fd, unused)
            table = os.memfd_create("gpumem-ipc-exports")
            try:
                os.write(table, copied)
                forged = forged_handle(genuine["process_number"], genuine["generation"], os.getpid(), table,
                                       genuine["slot"])
                env = {**SIM, **CONFIGURATIONS[name][1]}
                self.assertRefusedInOneLine(self.open_forged(forged), "outside it")
                # The genuine handle still opens: only the forgery was refused.
                self.assertEqual(key_values(run([TENSOR, "open", handle], env=env).stdout), {"open": "cudaSuccess"})
            finally:
                os.close(table)
        finally:
            exporter.stdin.close()
            self.assertEqual(exporter.wait(timeout=60), 0)
            exporter.stdout.close()

    def test_stretches_placing_a_block_outside_their_memory_are_refused(self):
        # A genuine VMM exporter's slot copied into a forged table, served by a forged descriptor
        # service that passes the genuine exporter's descriptors on (asked for as an importer would)
        # with the block or the stretches moved: past its memory the slot or the stretches are
        # impossible, or the driver refuses to map them.
        name = "bfc preallocated"
        for forgery, block_offset, first_offset, reason in (
                ("the block past its stretches", 1 << 40, None, "impossibly"),
                ("a stretch running past 2^64", None, "overflow", "impossibly"),
                ("a stretch 1 TiB into its memory", None, 1 << 40, "refused to map")):
            with self.subTest(forgery=forgery):
                exporter = start_waiting_exporter(environment(True, CONFIGURATIONS[name][1]))
                service = None
                try:
                    handle, genuine, copied = self.genuine_table_copy(exporter)
                    span_at = slot_offset(genuine["slot"]) + SLOT_HEADER.size + VMM_SPAN_AT
                    offset, count, unused = VMM_SPAN.unpack_from(copied, span_at)
                    self.assertGreaterEqual(count, 2)  # the 4 MiB segment over 2 MiB mappings
                    if block_offset is not None:
                        VMM_SPAN.pack_into(copied, span_at, block_offset, count, unused)
                    upstream = ServiceClient(handle)

                    def proxy(request):
                        reply, fds = upstream.ask(request["first"], request["count"])
                        stretches = list(reply["stretches"])
                        if request["first"] == 0 and first_offset is not None:
                            size = stretches[0][0]
                            stretches[0] = (size, 2**64 - size + 1 if first_offset == "overflow" else first_offset)
                        return reply_bytes(first=request["first"], stretches=stretches), fds

                    service = ForgedService(genuine["process_number"], proxy)
                    table = os.memfd_create("gpumem-ipc-exports")
                    try:
                        os.write(table, copied)
                        forged = forged_handle(genuine["process_number"], genuine["generation"], os.getpid(), table,
                                               genuine["slot"])
                        self.assertRefusedInOneLine(self.open_forged(forged), reason)
                        # The genuine handle still opens: only the forgery was refused.
                        env = {**SIM, **CONFIGURATIONS[name][1]}
                        self.assertEqual(key_values(run([TENSOR, "open", handle], env=env).stdout),
                                         {"open": "cudaSuccess"})
                    finally:
                        os.close(table)
                        upstream.close()
                finally:
                    if service is not None:
                        service.close()
                    exporter.stdin.close()
                    self.assertEqual(exporter.wait(timeout=60), 0)
                    exporter.stdout.close()

    def test_a_piece_naming_memory_the_driver_refuses_is_refused_in_one_line(self):
        # A VMM piece whose descriptor is /dev/null: no memory the driver can import.
        table = forged_table(79)
        service = ForgedService(79, lambda request: (reply_bytes(first=request["first"], stretches=[(2 << 20, 0)]),
                                                     [os.open("/dev/null", os.O_RDWR)]))
        try:
            write_live_slot(table, 2, 9, vmm_slot(0, 1, 4096))
            result = self.open_forged(forged_handle(79, 9, os.getpid(), table, 2))
            self.assertRefusedInOneLine(result, "refused piece 0")
        finally:
            service.close()
            os.close(table)

    def test_a_hostile_descriptor_service_is_refused_and_leaves_no_descriptor(self):
        # Whatever a service in the exporter's name sends, the importer refuses the open in one line
        # naming what was wrong, and holds exactly the descriptors it held before (every descriptor
        # it was sent is closed); one that never answers costs it 5 s.
        pieces = 20
        table = forged_table(81)
        null = lambda: os.open("/dev/null", os.O_RDWR)  # noqa: E731
        fifo_dir = tempfile.mkdtemp(prefix="gpumem-ipc-")
        fifo = os.path.join(fifo_dir, "fifo")
        os.mkfifo(fifo)
        fifo_fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        two_mib = [(2 << 20, 0)] * BATCH

        def stretches(request, count=None):
            return two_mib[:request["count"] if count is None else count]

        scenarios = [
            ("a FIFO", lambda r: (reply_bytes(first=r["first"], stretches=stretches(r)),
                                  [os.dup(fifo_fd) for _ in range(r["count"])]), "for piece 0 is a FIFO"),
            ("one descriptor more than asked for", lambda r: (reply_bytes(first=r["first"], stretches=stretches(r)),
                                                             [null() for _ in range(r["count"] + 1)]),
             "descriptors and"),
            ("one stretch fewer", lambda r: (reply_bytes(first=r["first"], stretches=stretches(r, r["count"] - 1)),
                                             [null() for _ in range(r["count"] - 1)]), "for 16 asked for"),
            ("a short reply", lambda r: (b"gpumemR1", [null()]), "impossible reply"),
            ("another protocol", lambda r: (b"x" * REPLY_BYTES, []), "impossible reply"),
            ("a freed block", lambda r: (reply_bytes("freed", first=r["first"]), []), "has freed the block"),
            ("a driver refusal", lambda r: (reply_bytes("refused", first=r["first"], driver_error=2), []),
             "could not export"),
            ("no permission", lambda r: (reply_bytes("not_permitted"), []), "refused this process its memory"),
            ("no answer", lambda r: None, "did not answer within 5 s"),
        ]
        importer = Driven("importer", environment(True, {**SIM, **CONFIGURATIONS["bfc growth"][1]}), nofile=64)
        try:
            self.assertEqual(importer.ask("init"), {"init": "ok"})
            importer.new_stderr()
            before = importer.descriptors()
            for slot, (forgery, answer, reason) in enumerate(scenarios):
                with self.subTest(forgery=forgery):
                    write_live_slot(table, slot, 3, vmm_slot(0, pieces, 4096))
                    service = ForgedService(81, answer)
                    try:
                        handle = forged_handle(81, 3, os.getpid(), table, slot)
                        self.assertEqual(importer.ask(f"open {handle} 0 4096", timeout=60),
                                         {"open": "cudaErrorInvalidValue"})
                    finally:
                        service.close()
                    lines = [line for line in importer.new_stderr().splitlines() if line.startswith("gpumem:")]
                    self.assertEqual(len(lines), 1, lines)
                    self.assertIn(reason, lines[0])
                    self.assertEqual(importer.descriptors(), before)
            # The name bound by another process, and no service at all.
            other = subprocess.Popen(
                ["python3", "-c", "import socket, sys, time\n"
                 "s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n"
                 "s.bind('\\0' + sys.argv[1]); s.listen(); print('bound', flush=True); time.sleep(120)",
                 SERVICE_NAME.format(pid=os.getpid(), number=81)[1:]], stdout=subprocess.PIPE, text=True)
            try:
                self.assertEqual(other.stdout.readline().strip(), "bound")
                write_live_slot(table, 20, 3, vmm_slot(0, pieces, 4096))
                handle = forged_handle(81, 3, os.getpid(), table, 20)
                for reason in (f"is process {other.pid}'s", "has no descriptor service"):
                    with self.subTest(reason=reason):
                        self.assertEqual(importer.ask(f"open {handle} 0 4096"), {"open": "cudaErrorInvalidValue"})
                        lines = [line for line in importer.new_stderr().splitlines() if line.startswith("gpumem:")]
                        self.assertEqual(len(lines), 1, lines)
                        self.assertIn(reason, lines[0])
                        self.assertEqual(importer.descriptors(), before)
                        other.kill()
                        other.wait()
            finally:
                if other.poll() is None:
                    other.kill()
                    other.wait()
                other.stdout.close()
            self.assertEqual(importer.finish(), 0)
        finally:
            importer.kill()
            os.close(table)
            os.close(fifo_fd)
            subprocess.run(["rm", "-rf", fifo_dir], check=False)


if __name__ == "__main__":
    unittest.main()
