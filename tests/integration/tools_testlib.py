"""Shared helpers for the tests of scripts/gpumem-report, gpumem-plot and gpumem-top, which need no build:
where the scripts are, running one with its stdout closed, what a terminal must never be sent, and
synthetic ledger files in the shim's layout (shim/share/ledger_format.h) with the locks that tell a
live member from a dead one.
"""

import fcntl
import os
import struct
import subprocess
import sys

SOURCE_ROOT = os.environ.get("GPUMEM_TEST_SOURCE_ROOT",
                             os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
# Each script is the source tree's unless GPUMEM_TEST_REPORT, _PLOT or _TOP names another (an installed copy).
REPORT = os.environ.get("GPUMEM_TEST_REPORT") or os.path.join(SOURCE_ROOT, "scripts", "gpumem-report")
PLOT = os.environ.get("GPUMEM_TEST_PLOT") or os.path.join(SOURCE_ROOT, "scripts", "gpumem-plot")
TOP = os.environ.get("GPUMEM_TEST_TOP") or os.path.join(SOURCE_ROOT, "scripts", "gpumem-top")
BROKEN_PIPE_STATUS = 141  # 128 + SIGPIPE: what a shell reports for a command killed by a closed pipe


def run_closed_stdout(command, timeout=60):
    """Runs `command` with its stdout a pipe whose reader has gone (as `| head` leaves it): any write
    to it fails. Returns the CompletedProcess (stderr captured as text)."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        return subprocess.run(command, stdout=writer, stderr=subprocess.PIPE, text=True, timeout=timeout)
    finally:
        os.close(writer)


def unsafe_characters(text: str) -> list:
    """The characters of `text` a terminal would take as controls: C0 except newline, DEL, C1, and the
    lone surrogates that stand for bytes that are not UTF-8."""
    return sorted({ch for ch in text if (ord(ch) < 0x20 and ch != "\n") or 0x7F <= ord(ch) <= 0x9F
                   or 0xD800 <= ord(ch) <= 0xDFFF})


# --- ledgers ----------------------------------------------------------------------------------

HEADER = struct.Struct("<8sIIIIQ16sQQQQ48x")
SLOT = struct.Struct("<iIQIIQQQQQQQQQQQQQ16sQQIIQIiQQQ48x")
HEADER_BYTES, SLOTS = 4096, 256
LEDGER_BYTES = HEADER_BYTES + SLOTS * SLOT.size  # 69,632 as docs/sharing.md says
IDENTITY = struct.Struct("<Q64s64s256s72s256s256s48x")  # one record per slot after the slots
IDENTITY_FIELDS = ("tag", "hostname", "pod_namespace", "pod_name", "container_id", "cgroup", "command_line")
SLOT_LOCK_BASE = 4096
FLOCK = struct.Struct("=hh4xqqi4x")
F_OFD_SETLK = 37  # Linux
F_WRLCK = 1
MEMBER_FIELDS = ("pid", "state", "start_time", "uid", "weight_milli", "min_bytes", "cap_bytes", "held", "in_use",
                 "demand", "guarantee", "allowance", "waiting_bytes", "reclaim_request", "given_back_bytes",
                 "peak_borrowed", "refusals", "active_until_ns", "comm", "reclaim_until_ns", "reserving",
                 "reclaim_wake", "reclaim_answered", "idle_bytes", "flags", "host_pid", "pid_namespace",
                 "user_namespace", "identity_tag")


def ledger_bytes(uuid: bytes, device_total: int, members=(), generation=2, outside=0, capacity=None,
                 identities=None) -> bytearray:
    """A ledger file's bytes: the header, and each member (a dict of MEMBER_FIELDS, with "slot") in its slot.
    identities: None for a file without the identity table (an older gpumem's), else {slot: a dict of
    IDENTITY_FIELDS, texts as bytes} written in the table after the slots."""
    data = bytearray(LEDGER_BYTES + (0 if identities is None else SLOTS * IDENTITY.size))
    for slot, record in (identities or {}).items():
        values = dict.fromkeys(IDENTITY_FIELDS, b"")
        values.update(record)
        IDENTITY.pack_into(data, LEDGER_BYTES + slot * IDENTITY.size, *(values[key] for key in IDENTITY_FIELDS))
    capacity = device_total - outside if capacity is None else capacity
    HEADER.pack_into(data, 0, b"GPUMEMLD", 1, HEADER_BYTES, SLOTS, SLOT.size, device_total, uuid, generation,
                     outside, len(members), capacity)
    for member in members:
        values = dict.fromkeys(MEMBER_FIELDS, 0)
        values.update(state=1, weight_milli=1000, cap_bytes=device_total, comm=b"worker")
        values.update((key, value) for key, value in member.items() if key != "slot")
        SLOT.pack_into(data, HEADER_BYTES + member["slot"] * SLOT.size, *(values[key] for key in MEMBER_FIELDS))
    return data


def ledger_name(uuid: bytes) -> str:
    return f"gpu-{uuid.hex()}.ledger"


def uuid_text(uuid: bytes) -> str:
    h = uuid.hex()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def write_ledger(directory: str, uuid: bytes, device_total: int, members=(), **header) -> str:
    path = os.path.join(directory, ledger_name(uuid))
    with open(path, "wb") as f:
        f.write(ledger_bytes(uuid, device_total, members, **header))
    return path


def hold_locks(path: str, *slots, ledger_lock=False) -> int:
    """Holds the lock byte of each slot (a live member's, as the shim holds it for its whole life) and,
    with ledger_lock, the ledger's own lock (byte 0, held by a member inside an update), through an open
    file description of this process: gpumem-top, another one, sees them held. Returns the descriptor;
    closing it releases them all."""
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    for byte in [SLOT_LOCK_BASE + slot for slot in slots] + ([0] if ledger_lock else []):
        fcntl.fcntl(fd, F_OFD_SETLK, FLOCK.pack(F_WRLCK, os.SEEK_SET, byte, 1, 0))
    return fd


def python_command(script: str, *args) -> list:
    """The command that runs `script` with this interpreter (quicker than its #! line through a pyenv shim)."""
    return [sys.executable, script, *map(str, args)]
