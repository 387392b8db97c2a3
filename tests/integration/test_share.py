"""Several processes on one GPU with GPUMEM_SHARE=auto (docs/sharing.md), over the simulator with a
device shared between processes (CUDASIM_SHARED_DEVICES), each scenario with 2, 4 and 8 processes:
(a) JAX-shaped processes with the default preallocation all run where the sum of their live peaks
fits, and without sharing the second fails; (b) JAX-, TensorFlow- and PyTorch-shaped processes side
by side; (c) a greedy process cannot take another's guarantee; (d) idle memory is borrowed and given
back in bounded time, and memory in use is not taken (the requester is refused with one line naming
the holders); (e) a SIGKILLed holder's charge is freed for the next request; (f) 200 processes join
and leave while others allocate; (g) processes of two users, with per-user and group directories;
(h) a member whose guarantee shrank below its partly used pieces is served from their idle granules.

The processes are tests/integration/programs/share_worker (its steps are described there); their
exit statistics (GPUMEM_STATS_FILE) give each one's share figures.
"""
import concurrent.futures
import glob
import fcntl
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest

import gpumem_testlib as t

MiB = 1 << 20
DEVICE_MIB = 4096
OVERHEAD_MIB = 64
COUNTS = (2, 4, 8)
# How each kind of program is shaped, by its environment alone.
SHAPES = {
    "jax": {},                                          # bfc, preallocating 0.75 (of its share)
    "tf": {"TF_GPU_ALLOCATOR": "cuda_malloc_async"},     # the stream-ordered pool
    "torch": {"GPUMEM_PREALLOCATE": "false"},           # bfc, growing on demand
}
WORKER = "share_worker"


def capacity_mib(processes: int) -> int:
    """What the members share: the device less every process's context, and room for one more."""
    return DEVICE_MIB - OVERHEAD_MIB * (processes + 1)


class Machine:
    """One simulated machine: a device every process shares, a sharing directory, and the processes."""

    def __init__(self, test: unittest.TestCase, share: bool = True, ledger_dir: str | None = None):
        self.test = test
        self.share = share
        self.tmp = tempfile.mkdtemp(prefix="gpumem-share-")
        test.addCleanup(self.close)
        self.sim_dir = os.path.join(self.tmp, "sim")
        self.ledger_dir = ledger_dir or os.path.join(self.tmp, "ledger")
        if ledger_dir is None:
            os.mkdir(self.ledger_dir, 0o700)
        self.procs = []

    def open_to_other_users(self) -> None:
        """Lets a process of another user run on this machine: its statistics and ready files, and the
        simulated device's file, writable by both users (the simulator makes that file 0600)."""
        os.chmod(self.tmp, 0o777)
        os.mkdir(self.sim_dir, 0o777)
        os.chmod(self.sim_dir, 0o777)
        device = os.path.join(self.sim_dir, "cudasim-" + (b"cudasim" + bytes(9)).hex() + ".device")
        with open(device, "w"):
            pass
        os.chmod(device, 0o666)

    def close(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            if proc.returncode is None or not proc.stdout.closed:
                proc.communicate()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, name: str) -> str:
        return os.path.join(self.tmp, name)

    def touch(self, name: str):
        with open(self.path(name), "w"):
            pass

    def env(self, shape: str = "jax", extra: dict | None = None) -> dict:
        env = t.clean_environment()
        env.update({
            "LD_LIBRARY_PATH": t.sim_dir(),
            "LD_PRELOAD": t.shim_path(),
            "CUDASIM_SHARED_DEVICES": self.sim_dir,
            "CUDASIM_DEVICE_MEMORY": f"{DEVICE_MIB}MiB",
            "CUDASIM_CONTEXT_OVERHEAD": f"{OVERHEAD_MIB}MiB",
            "GPUMEM_STATS_FILE": os.path.join(self.tmp, "stats-%p.json"),
        })
        if self.share:
            env.update({"GPUMEM_SHARE": "auto", "GPUMEM_SHARE_DIR": self.ledger_dir})
        env.update(SHAPES[shape])
        env.update(extra or {})
        return env

    def start(self, *steps, shape: str = "jax", env: dict | None = None, prefix: tuple = ()) -> subprocess.Popen:
        argv = list(prefix) + [t.program_path(WORKER)] + [str(s) for s in steps]
        proc = subprocess.Popen(argv, env=self.env(shape, env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, errors="replace")
        self.procs.append(proc)
        return proc

    def wait_for(self, name: str, proc: subprocess.Popen, timeout: float = 60) -> bool:
        """Waits until the file `name` exists (True) or `proc` ended first (False)."""
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.path(name)):
            if proc.poll() is not None:
                return os.path.exists(self.path(name))
            if time.monotonic() > deadline:
                self.test.fail(f"{name} never appeared")
            time.sleep(0.005)
        return True

    def finish(self, proc: subprocess.Popen, timeout: float = 60) -> "Outcome":
        out, err = proc.communicate(timeout=timeout)
        return Outcome(proc, out, err, self.stats(proc.pid))

    def stats(self, pid: int) -> dict | None:
        path = os.path.join(self.tmp, f"stats-{pid}.json")
        if not os.path.exists(path):
            return None
        with open(path) as f:
            devices = json.load(f)["devices"]
        return devices[0] if devices else None

    def top(self) -> dict:
        tool = os.path.join(t.source_root(), "scripts", "gpumem-top")
        result = subprocess.run([sys.executable, tool, "--json", "--dir", self.ledger_dir], capture_output=True,
                                text=True, timeout=30)
        self.test.assertEqual(result.returncode, 0, result.stderr)
        return json.loads(result.stdout)


class Outcome:
    def __init__(self, proc, out, err, stats):
        self.pid = proc.pid
        self.returncode = proc.returncode
        self.out = out
        self.err = err
        self.values = t.key_values(out)
        self.stats = stats

    @property
    def share(self) -> dict:
        assert self.stats is not None and self.stats.get("share"), self.describe()
        return self.stats["share"]

    def describe(self) -> str:
        return f"pid {self.pid} exit {self.returncode}\n--- stdout\n{self.out}--- stderr\n{self.err}"


def blocks(total_mib: int, count: int = 8) -> tuple:
    """`total_mib` as `count` blocks of whole MiB: (block MiB, blocks)."""
    return max(1, total_mib // count), count


class ShareTestCase(t.TestCase):
    def assertOk(self, outcome: Outcome):
        self.assertEqual(outcome.returncode, 0, outcome.describe())
        self.assertEqual(outcome.values.get("result"), "ok", outcome.describe())

    def start_in_turn(self, machine: Machine, count: int, steps_for, shape_for=lambda i: "jax", env=None):
        """Starts `count` processes one after the other, each once the one before said it was ready
        (or ended); returns them."""
        procs = []
        for i in range(count):
            proc = machine.start(*steps_for(i), shape=shape_for(i), env=env)
            procs.append(proc)
            machine.wait_for(f"ready-{i}", proc)
        return procs


class JaxShapedProcesses(ShareTestCase):
    """(a) The JAX page's first cause of out-of-memory failures: several processes each preallocating
    75% of the device."""

    def run_jax(self, count: int, share: bool) -> list:
        machine = Machine(self, share=share)
        peak = int(0.8 * capacity_mib(count) / count)
        size, n = blocks(peak)
        procs = self.start_in_turn(machine, count,
                                   lambda i: (f"alloc:{size}x{n}", f"touch:{machine.path(f'ready-{i}')}",
                                              f"churn:@{machine.path('done')}"))
        machine.touch("done")
        return [machine.finish(proc) for proc in procs]

    def test_all_run_to_the_end_when_their_live_peaks_fit(self):
        for count in COUNTS:
            with self.subTest(processes=count):
                outcomes = self.run_jax(count, share=True)
                for outcome in outcomes:
                    self.assertOk(outcome)
                # Each preallocated the fraction of the share it was guaranteed when it began.
                first = outcomes[0].share
                self.assertEqual(first["members_at_join"], 1)
                self.assertGreater(first["peak_borrowed"], 0)  # alone at first, it held more than its share later
                self.assertGreater(first["given_back"], 0)
                for outcome in outcomes[1:]:
                    self.assertGreater(outcome.share["members_at_join"], 1, outcome.describe())

    def test_without_sharing_the_second_fails(self):
        for count in COUNTS:
            with self.subTest(processes=count):
                outcomes = self.run_jax(count, share=False)
                self.assertOk(outcomes[0])
                self.assertIsNone(outcomes[0].stats["share"])
                # The first took 75% of the device: the second gets what is left, which holds its peak
                # only when the peaks are small (4 and 8 processes), and then a later one fails.
                failed = [o for o in outcomes if o.returncode != 0]
                self.assertTrue(failed, "without sharing every process fitted")
                if count == 2:
                    self.assertEqual(outcomes[1].returncode, 3, outcomes[1].describe())
                    self.assertEqual(outcomes[1].values.get("error"), "CUDA_ERROR_OUT_OF_MEMORY",
                                     outcomes[1].describe())


class FrameworksSideBySide(ShareTestCase):
    """(b) JAX-shaped beside TensorFlow-shaped (cuda_malloc_async) beside PyTorch-shaped growth."""

    def test_jax_tf_and_torch_share_one_gpu(self):
        kinds = ("jax", "tf", "torch")
        for count in COUNTS:
            with self.subTest(processes=count):
                machine = Machine(self)
                size, n = blocks(int(0.7 * capacity_mib(count) / count))
                procs = self.start_in_turn(
                    machine, count,
                    lambda i: (f"alloc:{size}x{n}", "info", f"touch:{machine.path(f'ready-{i}')}",
                               f"churn:@{machine.path('done')}", "info"),
                    shape_for=lambda i: kinds[i % 3])
                # The guarantees as the last to join published them, every member alive: each process's
                # own figure is the one of its last visit, which for the first may be from when it was alone.
                view = machine.top()["gpus"][0]
                alive = [m for m in view["members"] if m["alive"]]
                if len(alive) != count:  # what the ones that ended said
                    machine.touch("done")
                    ended = [o.describe() for o in (machine.finish(p) for p in procs) if o.returncode != 0]
                    self.fail(f"{len(alive)} of {count} alive: {view}\n" + "\n".join(ended))
                self.assertLessEqual(sum(m["guarantee"] for m in alive), view["capacity"], view)
                self.assertLessEqual(view["capacity"], DEVICE_MIB * MiB)
                machine.touch("done")
                outcomes = [machine.finish(proc) for proc in procs]
                for i, outcome in enumerate(outcomes):
                    self.assertOk(outcome)
                    self.assertEqual(outcome.stats["mode"], "cuda_async" if kinds[i % 3] == "tf" else "bfc")
                    # What the program reads agrees: cuMemGetInfo, cuDeviceTotalMem and NVML give the
                    # same total, its budget, never more than the device; what is free lies within it.
                    values = t.key_values(outcome.out)
                    self.assertEqual(values["agree"], "1", outcome.describe())
                    self.assertEqual(values["nvml_total"], values["total"], outcome.describe())
                    self.assertLessEqual(int(values["total"]), DEVICE_MIB * MiB)
                    self.assertLessEqual(int(values["free"]), int(values["total"]))
                    # At its last visit (the others may have left by then): within the device.
                    self.assertLessEqual(outcome.share["guarantee"], DEVICE_MIB * MiB, outcome.describe())


class GreedyProcess(ShareTestCase):
    """(c) A process that takes all it can borrows what the others leave idle, and gives it back when
    they need their guarantee: it cannot keep another's guarantee."""

    def test_a_greedy_process_cannot_take_another_s_guarantee(self):
        for count in COUNTS:
            with self.subTest(processes=count):
                machine = Machine(self)
                share = capacity_mib(count) // count
                first, n = blocks(int(0.5 * share), 4)
                later, m = blocks(int(0.4 * share), 4)  # up to 0.9 of the share, inside the guarantee
                victims = self.start_in_turn(
                    machine, count - 1,
                    lambda i: (f"alloc:{first}x{n}", f"touch:{machine.path(f'ready-{i}')}",
                               f"churn:@{machine.path('grow')}", f"alloc:{later}x{m}",
                               f"touch:{machine.path(f'grown-{i}')}", f"churn:@{machine.path('done')}"))
                greedy = machine.start(f"greedy:64:@{machine.path('stop')}", "info", f"touch:{machine.path('stopped')}",
                                       shape="torch")
                time.sleep(0.6)  # it has taken what the others leave idle
                machine.touch("grow")
                for i, victim in enumerate(victims):
                    if not machine.wait_for(f"grown-{i}", victim):
                        self.fail(f"victim {i} ended before it grew: {machine.finish(victim).describe()}")
                time.sleep(0.2)  # it keeps trying beside the grown victims
                machine.touch("stop")
                machine.wait_for("stopped", greedy)
                machine.touch("done")
                outcomes = [machine.finish(proc) for proc in victims]
                taker = machine.finish(greedy)
                for outcome in outcomes:
                    self.assertOk(outcome)
                self.assertOk(taker)
                self.assertGreater(int(taker.values["greedy_refusals"]), 0, taker.describe())
                # It borrowed what the others left idle (more than its own guarantee)...
                self.assertGreater(taker.share["peak_borrowed"], 0, taker.describe())
                self.assertGreater(int(taker.values["greedy_most"]), share * MiB, taker.describe())
                # ...and in the end holds no more than what the victims' grown blocks leave, give or take the
                # block each victim churns: freed, it is free for a moment and may be borrowed (the victim then
                # waits for it as the greedy process lets blocks go).
                grown = (count - 1) * (first * n + later * m) * MiB
                churned = (count - 1) * max(first, later) * MiB
                self.assertLessEqual(int(taker.values["held"]), capacity_mib(count) * MiB - grown + churned,
                                     taker.describe())


class PartlyUsedPieces(ShareTestCase):
    """A member that laid out its preallocation alone (pieces up to a 32nd of the device) and whose
    guarantee then shrank below what it holds in partly used pieces: when the share refuses it new
    memory, its next block is backed by the idle granules of those pieces (lent), not refused."""

    def test_a_member_over_its_guarantee_is_served_from_its_idle_granules(self):
        machine = Machine(self)
        # A: blocks of 1,000, 40, 1,000 and 8 MiB, the 40 MiB one freed: a hole of 20 granules in a
        # piece that also holds both 1,000 MiB blocks' ends, which cannot go back.
        holder = machine.start("alloc:1000x1", "alloc:40x1", "alloc:1000x1", "alloc:8x1", "drop:1",
                               f"touch:{machine.path('ready-a')}", f"wait:{machine.path('go')}", "timed:96",
                               env={"GPUMEM_SHARE_WAIT": "200ms"})
        self.assertTrue(machine.wait_for("ready-a", holder))
        # B joins (A's guarantee halves, below what A holds) and takes every byte left.
        filler = machine.start("fill:32", f"touch:{machine.path('ready-b')}", f"wait:{machine.path('done')}",
                               shape="torch", env={"GPUMEM_SHARE_WAIT": "200ms"})
        self.assertTrue(machine.wait_for("ready-b", filler))
        machine.touch("go")
        held = machine.finish(holder)
        machine.touch("done")
        filled = machine.finish(filler)
        self.assertOk(filled)
        self.assertOk(held)
        # Beyond its guarantee with nothing free on the device, A's 96 MiB came from its own hole.
        self.assertGreater(held.share["members_at_join"], 0)
        self.assertEqual(held.values["timed"], "CUDA_SUCCESS", held.describe() + filled.describe())
        self.assertLessEqual(held.stats["reserved"] + filled.stats["reserved"], capacity_mib(2) * MiB,
                             held.describe() + filled.describe())


class BorrowAndGiveBack(ShareTestCase):
    """(d) Memory one process leaves idle is borrowed by another and comes back when asked, within the
    bounded time; memory in use is never taken (the requester waits, then gets one line)."""

    def test_idle_memory_comes_back_in_bounded_time(self):
        for count in COUNTS:
            with self.subTest(processes=count):
                machine = Machine(self)
                lenders = self.start_in_turn(
                    machine, count - 1,
                    lambda i: ("alloc:16x1", f"touch:{machine.path(f'ready-{i}')}", f"churn:@{machine.path('lend')}",
                               f"timed:{int(0.6 * capacity_mib(count) / count)}", f"churn:@{machine.path('done')}"),
                    shape_for=lambda i: "torch")
                size, n = blocks(int(0.85 * (capacity_mib(count) - 16 * (count - 1))))
                borrower = machine.start(f"alloc:{size}x{n}", "say:borrowed=1", f"free:{n - 1}",
                                         f"touch:{machine.path('ready-borrower')}", f"churn:@{machine.path('done')}",
                                         shape="torch")
                self.assertTrue(machine.wait_for("ready-borrower", borrower))
                machine.touch("lend")
                time.sleep(0.5)
                machine.touch("done")
                outcomes = [machine.finish(proc) for proc in lenders]
                lent = machine.finish(borrower)
                self.assertOk(lent)
                self.assertGreater(lent.share["peak_borrowed"], 0)
                self.assertGreater(lent.share["given_back"], 0)
                for outcome in outcomes:
                    self.assertOk(outcome)
                    self.assertEqual(outcome.values["timed"], "CUDA_SUCCESS", outcome.describe())
                    # Well inside the wait (5 s): the borrower answers at its next allocation or free.
                    self.assertLess(float(outcome.values["took_ms"]), 2000, outcome.describe())

    def test_memory_in_use_is_not_taken_and_the_refusal_names_the_holders(self):
        for count in COUNTS:
            with self.subTest(processes=count):
                machine = Machine(self)
                askers, holder = start_askers_then_holder(self, machine, count, wait="300ms")
                outcomes = [machine.finish(proc) for proc in askers]
                for outcome in outcomes:
                    self.assertOk(outcome)  # the program goes on; only the request was refused
                    self.assertEqual(outcome.values["timed"], "CUDA_ERROR_OUT_OF_MEMORY", outcome.describe())
                    self.assertGreaterEqual(float(outcome.values["took_ms"]), 300, outcome.describe())
                    self.assertEqual(outcome.share["refusals_after_wait"], 1, outcome.describe())
                    lines = [line for line in outcome.err.splitlines() if "processes share" in line]
                    self.assertEqual(len(lines), 1, outcome.describe())
                    # Named by its pid (this namespace's: no namespace said), command and identity.
                    self.assertRegex(lines[0], rf'pid {holder.pid} \(share_worker; host "[^"]*"(, [^;]*)?, '
                                               rf'uid {os.geteuid()}\) holds ')
                    self.assertIn("waited 300 ms for borrowed memory", lines[0])
                holder.kill()
                holder.communicate()


def start_askers_then_holder(test, machine: Machine, count: int, wait: str):
    """count - 1 processes join holding nothing; then one fills the device (it borrows all their
    guarantees, and keeps it in use); then each of the first asks for half its guarantee, waiting at
    most `wait`. Returns (askers, holder)."""
    ask = int(0.5 * capacity_mib(count) / count)
    askers = test.start_in_turn(
        machine, count - 1,
        lambda i: ("info", f"touch:{machine.path(f'ready-{i}')}", f"wait:{machine.path('go')}", f"timed:{ask}"),
        shape_for=lambda i: "torch", env={"GPUMEM_SHARE_WAIT": wait})
    holder = machine.start("fill:32", f"touch:{machine.path('ready-holder')}", "pause", shape="torch")
    test.assertTrue(machine.wait_for("ready-holder", holder))
    machine.touch("go")
    return askers, holder


class KilledHolder(ShareTestCase):
    """(e) A holder killed with SIGKILL loses its charge at once: the requests waiting for it go
    through."""

    def test_sigkill_of_a_holder_frees_its_charge_for_the_next_request(self):
        for count in COUNTS:
            with self.subTest(processes=count):
                machine = Machine(self)
                askers, holder = start_askers_then_holder(self, machine, count, wait="30s")
                time.sleep(0.4)
                holder.send_signal(signal.SIGKILL)
                holder.communicate()
                for proc in askers:
                    outcome = machine.finish(proc)
                    self.assertOk(outcome)
                    self.assertEqual(outcome.values["timed"], "CUDA_SUCCESS", outcome.describe())
                    # They waited for the holder, and got the memory soon after it died, far inside
                    # the 30 s they could have waited.
                    self.assertGreater(float(outcome.values["took_ms"]), 300, outcome.describe())
                    self.assertLess(float(outcome.values["took_ms"]), 5000, outcome.describe())


class StoppedMember(ShareTestCase):
    """A member stopped while it updates the ledger (SIGSTOP, a debugger) keeps the ledger's lock until
    it runs again. The test holds that lock itself (an OFD lock on the ledger's first byte, as the
    shim takes it): no other process depends on it making progress."""

    @staticmethod
    def hold_ledger_lock(ledger_dir: str) -> int:
        ledger = glob.glob(os.path.join(ledger_dir, "gpu-*.ledger"))[0]
        fd = os.open(ledger, os.O_RDWR)
        fcntl.fcntl(fd, 37, struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0))  # F_OFD_SETLK
        return fd

    def test_a_member_and_a_newcomer_go_on_and_the_newcomer_joins_once_the_ledger_is_free(self):
        machine = Machine(self)
        member = machine.start("alloc:64x1", f"touch:{machine.path('member-ready')}",
                               f"wait:{machine.path('locked')}", "timed:64", "timed:64", "timed:64",
                               f"touch:{machine.path('member-done')}", f"churn:@{machine.path('done')}",
                               shape="torch")
        self.assertTrue(machine.wait_for("member-ready", member))
        fd = self.hold_ledger_lock(machine.ledger_dir)
        machine.touch("locked")
        # The newcomer cannot join while the lock is held: it runs on a provisional limit, and joins
        # once the lock is free (it keeps allocating meanwhile).
        newcomer = machine.start("alloc:64x1", f"touch:{machine.path('newcomer-ready')}",
                                 f"churn:@{machine.path('done')}", shape="torch", env={"GPUMEM_LOG_LEVEL": "info"})
        self.assertTrue(machine.wait_for("member-done", member))
        self.assertTrue(machine.wait_for("newcomer-ready", newcomer))
        os.close(fd)  # the stopped member runs again, and lets go of the lock
        time.sleep(1.0)
        top = machine.top()
        machine.touch("done")
        member_outcome, newcomer_outcome = machine.finish(member), machine.finish(newcomer)
        self.assertOk(member_outcome)
        self.assertOk(newcomer_outcome)
        # The member's three blocks inside its guarantee came at once, the first after the patience
        # of one visit at most (2 s), the others without waiting for the lock again.
        took = [float(line.split("=")[1]) for line in member_outcome.out.splitlines() if line.startswith("took_ms=")]
        self.assertEqual(len(took), 3, member_outcome.describe())
        self.assertLessEqual(took[0], 2500, member_outcome.describe())
        self.assertLessEqual(max(took[1:]), 500, member_outcome.describe())
        self.assertIn("stayed locked by another process", newcomer_outcome.err, newcomer_outcome.describe())
        self.assertIn("joined the GPU's ledger once it was free", newcomer_outcome.err, newcomer_outcome.describe())
        # Both are members now, each holding what it took.
        members = {m["pid"]: m for gpu in top["gpus"] for m in gpu["members"] if m.get("alive")}
        self.assertIn(newcomer.pid, members, top)
        self.assertIn(member.pid, members, top)
        self.assertGreaterEqual(members[newcomer.pid]["held"], 64 * MiB, top)
        self.assertIsNotNone(newcomer_outcome.stats["share"], newcomer_outcome.describe())


class ManyProcesses(ShareTestCase):
    """(f) 200 processes join and leave while others allocate: no deadlock, every process ends, and
    nothing stays charged."""

    def test_200_processes_join_and_leave(self):
        machine = Machine(self)
        started = time.monotonic()
        steady = [machine.start("alloc:32x4", f"churn:@{machine.path('done')}", shape="torch"),
                  machine.start("alloc:32x4", f"churn:@{machine.path('done')}", shape="tf")]

        def short_lived(i: int) -> Outcome:
            proc = machine.start("alloc:16x2", "free:1", "alloc:8x2", "info", shape=("torch", "jax", "tf")[i % 3])
            return machine.finish(proc, timeout=120)

        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            outcomes = list(pool.map(short_lived, range(200)))
        machine.touch("done")
        for proc in steady:
            self.assertOk(machine.finish(proc))
        for outcome in outcomes:
            self.assertOk(outcome)
        joined = [o.share["members_at_join"] for o in outcomes]
        self.assertGreater(max(joined), 2, "the processes never overlapped")
        # Every process has ended: no member is alive and nothing is held by the living.
        view = machine.top()
        self.assertEqual(len(view["gpus"]), 1, view)
        gpu = view["gpus"][0]
        self.assertEqual([m for m in gpu["members"] if m["alive"]], [])
        self.assertEqual(gpu["held"], 0)
        # A newcomer finds the dead dropped: alone, with the whole capacity as its guarantee, and it can
        # have nearly all of it.
        size, n = blocks(int(0.9 * capacity_mib(1)))
        last = machine.finish(machine.start(f"alloc:{size}x{n}", shape="torch"))
        self.assertOk(last)
        self.assertEqual(last.share["members_at_join"], 1)
        self.assertEqual(last.share["guarantee"], capacity_mib(1) * MiB)
        self.assertLess(time.monotonic() - started, 90)


class FastPath(ShareTestCase):
    """An allocation the arena serves from memory it holds (no new region, no granule mapped) does
    not touch the ledger: a hundred thousand of them make no more ledger updates than a thousand."""

    def test_the_fast_path_makes_no_ledger_update(self):
        machine = Machine(self)
        updates = {}
        for pairs in (1000, 100000):
            outcome = machine.finish(machine.start("alloc:1x4", f"pairs:{pairs}"), timeout=120)
            self.assertOk(outcome)
            updates[pairs] = outcome.share["ledger_updates"]
        # The join, the preallocation's granules and the frees at exit: the same in both.
        self.assertEqual(updates[1000], updates[100000], updates)
        self.assertLess(updates[1000], 5000, updates)


class Top(ShareTestCase):
    """gpumem-top reads the ledgers as they are: the members, what each holds, the dead marked."""

    def test_the_view_lists_members_and_marks_the_dead(self):
        machine = Machine(self)
        holder = machine.start("alloc:256x2", f"touch:{machine.path('ready-0')}", "pause", shape="torch")
        self.assertTrue(machine.wait_for("ready-0", holder))
        other = machine.start("alloc:128x1", f"touch:{machine.path('ready-1')}", "pause", shape="torch")
        self.assertTrue(machine.wait_for("ready-1", other))
        view = machine.top()
        members = {m["pid"]: m for m in view["gpus"][0]["members"]}
        self.assertEqual(members[holder.pid]["held"], 512 * MiB)
        self.assertEqual(members[other.pid]["held"], 128 * MiB)
        self.assertTrue(all(m["alive"] and m["command"] == WORKER for m in members.values()), members)
        self.assertEqual(members[holder.pid]["guarantee"] + members[other.pid]["guarantee"],
                         view["gpus"][0]["capacity"])
        holder.kill()
        holder.communicate()
        view = machine.top()
        members = {m["pid"]: m for m in view["gpus"][0]["members"]}
        self.assertFalse(members[holder.pid]["alive"])  # until the next join or refusal drops it
        self.assertEqual(view["gpus"][0]["held"], 128 * MiB)
        tool = os.path.join(t.source_root(), "scripts", "gpumem-top")
        text = subprocess.run([sys.executable, tool, "--once", "--dir", machine.ledger_dir], capture_output=True,
                              text=True, timeout=30)
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertRegex(text.stdout, r"PID +HOST PID +COMMAND +WEIGHT +GUARANTEE +BUDGET +IN USE +HELD +BORROWED +WAITING +WHO")
        self.assertRegex(text.stdout, rf"(?m)^ +{holder.pid} +- +{WORKER} .* dead$")
        self.assertRegex(text.stdout, rf"(?m)^ +{other.pid} +{other.pid} +{WORKER} +1 +.*128\.0 MiB +0 B +- +host .*uid \d+$")
        # A file that is not a ledger is named, with why, and the rest is read.
        with open(os.path.join(machine.ledger_dir, "gpu-00.ledger"), "w") as f:
            f.write("not a ledger")
        view = machine.top()
        self.assertEqual(len(view["gpus"]), 1)
        self.assertIn("not a gpumem ledger", view["unreadable"][0]["error"])


class TopAfterReset(ShareTestCase):
    def test_in_use_follows_a_context_reset(self):
        machine = Machine(self)
        proc = machine.start("alloc:64x4", f"touch:{machine.path('held')}", f"wait:{machine.path('go')}", "reset",
                             f"touch:{machine.path('reset')}", f"wait:{machine.path('done')}", shape="torch")
        self.assertTrue(machine.wait_for("held", proc))
        member = {m["pid"]: m for m in machine.top()["gpus"][0]["members"]}[proc.pid]
        self.assertEqual(member["in_use"], 256 * MiB, member)
        machine.touch("go")
        self.assertTrue(machine.wait_for("reset", proc))
        member = {m["pid"]: m for m in machine.top()["gpus"][0]["members"]}[proc.pid]
        self.assertEqual((member["in_use"], member["held"]), (0, 0), member)  # the blocks went with the context
        machine.touch("done")
        self.assertOk(machine.finish(proc))


class TwoUsers(ShareTestCase):
    """(g) Processes of two users: each user's default directory is its own, so they do not share a
    ledger (the device itself they still share); a group directory an administrator made lets them."""

    NOBODY = 65534

    def setUp(self):
        if os.geteuid() != 0 or shutil.which("setpriv") is None:
            self.skipTest("needs root and setpriv to run a process as another user")

    def two_user_machine(self, ledger_dir=None) -> Machine:
        machine = Machine(self, ledger_dir=ledger_dir)
        machine.open_to_other_users()
        return machine

    def as_nobody(self, machine: Machine, *steps, env=None) -> subprocess.Popen:
        return machine.start(*steps, shape="torch", env=env,
                             prefix=("setpriv", f"--reuid={self.NOBODY}", f"--regid={self.NOBODY}", "--clear-groups"))

    def side_by_side(self, machine: Machine, env=None) -> tuple:
        """The other user's process holds 256 MiB while one of this user's takes as much: (mine, theirs)."""
        other = self.as_nobody(machine, "alloc:256x1", f"touch:{machine.path('ready-other')}",
                               f"churn:@{machine.path('done')}", env=env)
        self.assertTrue(machine.wait_for("ready-other", other))
        mine = machine.finish(machine.start("alloc:256x1", shape="torch", env=env))
        machine.touch("done")
        theirs = machine.finish(other)
        self.assertOk(mine)
        self.assertOk(theirs)
        return mine, theirs

    def test_default_directories_are_per_user(self):
        mine, theirs = self.side_by_side(self.two_user_machine(), env={"GPUMEM_SHARE_DIR": ""})
        self.assertEqual(mine.share["members_at_join"], 1)
        self.assertEqual(theirs.share["members_at_join"], 1)

    def test_a_group_directory_lets_both_users_share(self):
        group_dir = tempfile.mkdtemp(prefix="gpumem-group-")
        self.addCleanup(shutil.rmtree, group_dir, True)
        os.chown(group_dir, 0, self.NOBODY)
        os.chmod(group_dir, 0o2770)
        mine, theirs = self.side_by_side(self.two_user_machine(ledger_dir=group_dir))
        self.assertEqual(theirs.share["members_at_join"], 1)
        self.assertEqual(mine.share["members_at_join"], 2)
        self.assertEqual(mine.share["guarantee"], capacity_mib(2) * MiB // 2)
        ledgers = glob.glob(os.path.join(group_dir, "gpu-*.ledger"))
        self.assertEqual(len(ledgers), 1)
        self.assertEqual(os.stat(ledgers[0]).st_mode & 0o777, 0o660)
        self.assertEqual(os.stat(ledgers[0]).st_gid, self.NOBODY)

    def test_a_default_directory_another_user_made_first_is_not_joined(self):
        # Anyone may make /dev/shm/gpumem-<uid> first: the process then shares through its runtime
        # directory, or says in one line that it cannot share.
        squatted = f"/dev/shm/gpumem-{self.NOBODY}"
        if os.path.lexists(squatted):  # the other user's own, from an earlier test: set aside meanwhile
            aside = tempfile.mkdtemp(prefix="gpumem-aside-", dir="/dev/shm")
            os.rename(squatted, os.path.join(aside, "kept"))
            self.addCleanup(shutil.rmtree, aside, True)
            self.addCleanup(os.rename, os.path.join(aside, "kept"), squatted)
        os.mkdir(squatted, 0o755)  # root's, as another user would leave it
        self.addCleanup(shutil.rmtree, squatted, True)
        runtime = tempfile.mkdtemp(prefix="gpumem-runtime-")
        self.addCleanup(shutil.rmtree, runtime, True)
        os.chown(runtime, self.NOBODY, self.NOBODY)
        os.chmod(runtime, 0o700)
        machine = self.two_user_machine()
        for env, shares in (({"GPUMEM_SHARE_DIR": ""}, False),
                            ({"GPUMEM_SHARE_DIR": "", "XDG_RUNTIME_DIR": runtime}, True)):
            with self.subTest(runtime_dir=shares):
                outcome = machine.finish(self.as_nobody(machine, "alloc:64x1", env=env))
                self.assertOk(outcome)
                self.assertEqual(os.listdir(squatted), [])  # nothing planted in, nothing taken from it
                lines = [line for line in outcome.err.splitlines() if squatted in line]
                self.assertEqual(len(lines), 1, outcome.describe())
                self.assertIn("belongs to uid 0", lines[0])
                if shares:
                    self.assertIn(f'sharing through "{runtime}/gpumem" instead', lines[0])
                    self.assertEqual(outcome.share["members_at_join"], 1, outcome.describe())
                    self.assertEqual(len(glob.glob(os.path.join(runtime, "gpumem", "gpu-*.ledger"))), 1)
                else:
                    self.assertIn("set GPUMEM_SHARE_DIR", lines[0])
                    self.assertIsNone(outcome.stats["share"])

    def test_a_users_own_group_writable_directory_is_no_group_directory(self):
        # Only root makes a group directory: one this user made setgid and group writable would let any
        # member of its group plant a ledger.
        own = tempfile.mkdtemp(prefix="gpumem-own-group-")
        self.addCleanup(shutil.rmtree, own, True)
        os.chown(own, self.NOBODY, self.NOBODY)
        os.chmod(own, 0o2770)
        machine = self.two_user_machine(ledger_dir=own)
        outcome = machine.finish(self.as_nobody(machine, "alloc:64x1"))
        self.assertOk(outcome)
        lines = [line for line in outcome.err.splitlines() if "GPUMEM_SHARE=auto, but" in line]
        self.assertEqual(len(lines), 1, outcome.describe())
        self.assertIn("no group directory", lines[0])
        self.assertIsNone(outcome.stats["share"])

    def test_another_users_directory_is_refused_with_one_line(self):
        theirs = tempfile.mkdtemp(prefix="gpumem-theirs-")
        self.addCleanup(shutil.rmtree, theirs, True)
        os.chown(theirs, self.NOBODY, self.NOBODY)
        machine = Machine(self, ledger_dir=theirs)
        outcome = machine.finish(machine.start("alloc:64x1", shape="torch"))
        self.assertOk(outcome)  # the program runs, unshared
        lines = [line for line in outcome.err.splitlines() if "GPUMEM_SHARE=auto, but" in line]
        self.assertEqual(len(lines), 1, outcome.describe())
        self.assertIn("belongs to uid 65534", lines[0])
        self.assertIsNone(outcome.stats["share"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
