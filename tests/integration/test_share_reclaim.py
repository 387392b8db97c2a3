"""Reclaim without the program's help (docs/sharing.md, "Reclaim"), over processes that really share
one simulated device (CUDASIM_SHARED_DEVICES), each scenario with 2, 4 and 8 processes: the members
that hold the memory make no CUDA call at all while another needs it (they wait for a file), or are
busy in a long call.

(a) idle preallocated lenders: their unused preallocations are lent to a newcomer, beyond its
    guarantee; (b) an idle borrower after its frees gives back what another needs inside its
    guarantee; (c) a lender busy computing (its stream busy for seconds in steps, no allocation) gives
    back while it computes; (d) a member whose program holds the arena's
    lock in a long call (slow driver mappings) gives back once the call ends, and the call is not
    disturbed; (e) a member forks children and exits while its reclaim thread answers requests; (f)
    refusals name their cause and the knob that would help.

Each process is tests/integration/programs/share_worker; the times are the requester's own
("took_ms": one cuMemAlloc), and the bound checked is the wait's (GPUMEM_SHARE_WAIT, 5 s) halved: the
figures measured on an idle machine are in bench/share.md.
"""
import time
import unittest

import gpumem_testlib as t
from test_share import COUNTS, MiB, Machine, ShareTestCase, capacity_mib

# Well inside GPUMEM_SHARE_WAIT (5 s): without a reclaim thread these requests wait all of it and are
# refused (bench/share.md, "before"); the target on an unloaded machine is 100 ms plus the driver's
# own time to map the memory.
BOUND_MS = 2500


def share_mib(count: int) -> int:
    return capacity_mib(count) // count


class ReclaimTestCase(ShareTestCase):
    def assertCameInTime(self, outcome, bound_ms: float = BOUND_MS):
        self.assertOk(outcome)
        self.assertEqual(outcome.values.get("timed"), "CUDA_SUCCESS", outcome.describe())
        self.assertLess(float(outcome.values["took_ms"]), bound_ms, outcome.describe())

    def holders(self, machine: Machine, count: int, steps_for, shape: str, env: dict | None = None):
        """count - 1 members, started in turn; each runs its steps, says it is ready, then makes no CUDA
        call until the file 'done' exists (it then ends normally, writing its statistics)."""
        return self.start_in_turn(
            machine, count - 1,
            lambda i: tuple(steps_for(i)) + (f"touch:{machine.path(f'ready-{i}')}", f"wait:{machine.path('done')}"),
            shape_for=lambda i: shape, env=env)

    @staticmethod
    def held_by(machine: Machine, pid: int) -> int:
        """What the member of process `pid` holds, as the ledger says (0 before it joined)."""
        gpus = machine.top()["gpus"]
        members = gpus[0]["members"] if gpus else []
        return next((m["held"] for m in members if m["pid"] == pid and m["alive"]), 0)

    def finish_holders(self, machine: Machine, holders: list) -> list:
        machine.touch("done")
        outcomes = [machine.finish(proc) for proc in holders]
        for outcome in outcomes:
            self.assertOk(outcome)
        return outcomes


class IdlePreallocatedLenders(ReclaimTestCase):
    """(a) JAX-shaped members preallocate, use little of it and go idle; a newcomer asks for more than
    its guarantee: only their idle preallocations can hold it, and they lend them."""

    def test_idle_preallocations_are_lent(self):
        for count in COUNTS:
            with self.subTest(processes=count):
                machine = Machine(self)
                holders = self.holders(machine, count, lambda i: ("alloc:16x1",), shape="jax")
                ask = int(1.25 * share_mib(count))  # beyond its guarantee
                newcomer = machine.finish(machine.start(f"timed:{ask}", shape="torch"))
                self.assertCameInTime(newcomer)
                self.assertGreater(newcomer.share["peak_borrowed"], 0, newcomer.describe())
                outcomes = self.finish_holders(machine, holders)
                self.assertGreaterEqual(sum(o.share["given_back"] for o in outcomes), ask * MiB - share_mib(count) * MiB,
                                        [o.describe() for o in outcomes])


class IdleBorrower(ReclaimTestCase):
    """(b) A member borrows most of the device, frees every block and goes idle; each of the others
    then asks for 0.9 of its guarantee."""

    def test_an_idle_borrower_gives_back_after_its_frees(self):
        for count in COUNTS:
            with self.subTest(processes=count):
                machine = Machine(self)
                askers = self.start_in_turn(
                    machine, count - 1,
                    lambda i: ("alloc:16x1", f"touch:{machine.path(f'ready-{i}')}", f"wait:{machine.path('go')}",
                               f"timed:{int(0.9 * share_mib(count)) - 16}"),
                    shape_for=lambda i: "torch")
                most = int(0.9 * (capacity_mib(count) - 16 * (count - 1)))
                borrower = machine.start(f"alloc:{most // 8}x8", "free:8", f"touch:{machine.path('ready-borrower')}",
                                         f"wait:{machine.path('done')}", shape="torch")
                self.assertTrue(machine.wait_for("ready-borrower", borrower))
                machine.touch("go")
                for proc in askers:
                    self.assertCameInTime(machine.finish(proc))
                machine.touch("done")
                lent = machine.finish(borrower)
                self.assertOk(lent)
                self.assertGreater(lent.share["peak_borrowed"], 0, lent.describe())
                self.assertGreater(lent.share["given_back"], 0, lent.describe())


class BusyLender(ReclaimTestCase):
    """(c) JAX-shaped members preallocate and compute for seconds in 10 ms steps, each waited for (a
    training loop that allocates nothing); a newcomer needs its guarantee meanwhile. cuMemUnmap waits
    for the device's queued work, so memory goes back between two steps (docs/sharing.md)."""

    COMPUTE_MS = 4000

    def test_a_lender_busy_computing_gives_back_meanwhile(self):
        for count in COUNTS:
            with self.subTest(processes=count):
                machine = Machine(self)
                holders = self.start_in_turn(
                    machine, count - 1,
                    lambda i: ("alloc:16x1", f"touch:{machine.path(f'ready-{i}')}", f"train:{self.COMPUTE_MS}"),
                    shape_for=lambda i: "jax")
                started = time.monotonic()
                newcomer = machine.finish(machine.start(f"timed:{int(0.9 * share_mib(count))}", shape="torch"))
                elapsed_ms = (time.monotonic() - started) * 1000
                self.assertCameInTime(newcomer)
                # It came while the last lender still computed: from the lenders' idle memory, not their exit.
                self.assertLess(elapsed_ms, self.COMPUTE_MS, newcomer.describe())
                for proc in holders:
                    outcome = machine.finish(proc)
                    self.assertOk(outcome)
                    # The computation was not disturbed (never shorter; not held up by the reclaim).
                    self.assertGreaterEqual(float(outcome.values["compute_ms"]), self.COMPUTE_MS, outcome.describe())
                    self.assertLess(float(outcome.values["compute_ms"]), self.COMPUTE_MS + 2000, outcome.describe())


class LongCallHoldingTheArena(ReclaimTestCase):
    """(d) A member freed a block (idle memory another will need), then a thread of its program grows
    the arena by much more with slow driver mappings (CUDASIM_LATENCY, 1 ms a mapping), holding the
    arena's lock throughout; a newcomer needs the idle block inside its guarantee meanwhile. The
    reclaim thread never waits for that lock: it tries again and gives back once the call has ended (or
    the call's own thread gives the block back when the ledger refuses its growth); the call is served. The others (4 and 8 processes) hold a little and wait."""

    ATTEMPTS = 3

    def test_a_long_call_delays_the_give_back_without_deadlock(self):
        for count in COUNTS:
            with self.subTest(processes=count):
                # On a loaded machine the newcomer's start (a process, the simulator, the shim) can take
                # longer than the whole call: it then asks after the call ended, when nothing needs giving
                # back. Such an attempt tests nothing and is made again; every attempt checks the rest.
                for _ in range(self.ATTEMPTS):
                    if self.long_call_and_newcomer(count):
                        break
                else:
                    self.fail(f"in {self.ATTEMPTS} attempts the newcomer asked only after the long call had ended")

    def long_call_and_newcomer(self, count) -> bool:
        """One attempt; True when the newcomer asked while the long call was under way."""
        machine = Machine(self)
        others = self.holders(machine, count - 1, lambda i: ("alloc:16x1",), shape="torch")
        ask = int(0.9 * share_mib(count))
        idle = 400
        # The long call: all the device leaves beside the newcomer's ask, less a margin: it fits
        # once the idle block is back, and not before.
        grow = capacity_mib(count) - ask - 16 * (count - 2) - 200
        holder = machine.start("alloc:16x1", f"alloc:{idle}x1", "free:1", f"touch:{machine.path('ready-holder')}",
                               f"wait:{machine.path('go')}", f"thread_alloc:{grow}", "join",
                               f"wait:{machine.path('done')}", shape="torch",
                               env={"CUDASIM_LATENCY": "cuMemMap=1000"})
        self.assertTrue(machine.wait_for("ready-holder", holder))
        held_before = self.held_by(machine, holder.pid)
        machine.touch("go")
        # The long call is under way (holding the arena's lock) once its holding grows: on a loaded
        # machine its thread may start later than any fixed sleep.
        deadline = time.monotonic() + 30
        while self.held_by(machine, holder.pid) < held_before + 32 * MiB:
            self.assertLess(time.monotonic(), deadline, "the long call never began")
            if holder.poll() is not None:
                self.fail(f"the holder ended: {machine.finish(holder).describe()}")
            time.sleep(0.005)
        newcomer = machine.finish(machine.start(f"timed:{ask}", shape="torch"))
        machine.touch("done")
        outcome = machine.finish(holder)
        self.assertOk(outcome)
        self.assertEqual(outcome.values["thread_alloc"], "CUDA_SUCCESS", outcome.describe())
        call_ms = float(outcome.values["thread_took_ms"])
        # The newcomer's memory came within the bound after the call ended, and the call was served. It
        # may come sooner: once the newcomer waits inside its guarantee, the ledger refuses the long
        # call's further growth, and the call's own thread gives the idle block back to go on.
        self.assertCameInTime(newcomer, call_ms + BOUND_MS)
        self.finish_holders(machine, others)
        if int(newcomer.values["asked_at_ns"]) >= int(outcome.values["thread_ended_at_ns"]):
            return False
        self.assertGreater(outcome.share["given_back"], 0, outcome.describe())
        return True


class ForkAndExitDuringReclaim(ReclaimTestCase):
    """(e) Preallocating holders, their preallocations mostly idle, fork 12 children one after the other
    (each a driver and a ledger membership of its own, asking for a block) and exit with a block still
    allocated, while two newcomers ask for their memory: no process hangs or crashes, every child ends
    well, the holders' threads gave memory back, and no exited holder is left in the ledger."""

    def test_fork_and_exit_while_requests_are_answered(self):
        for count in COUNTS:
            with self.subTest(processes=count):
                machine = Machine(self)
                # Preallocating: most of what they hold is idle (and not trimmed by their own frees).
                holders = self.start_in_turn(
                    machine, count - 1,
                    lambda i: ("alloc:16x1", f"touch:{machine.path(f'ready-{i}')}",
                               f"wait:{machine.path('go')}", "fork:12", "exit"),
                    # The children's contexts take no device memory: each needs its block alone, which
                    # it asks of the ledger as a member of its own.
                    shape_for=lambda i: "jax", env={"CUDASIM_CONTEXT_OVERHEAD": "0MiB"})
                # The newcomers make their contexts first (the children's take no device memory, so the
                # ledger keeps no room for one), then all go at once.
                # Each ask stays inside its guarantee with every holder's child a member too.
                ask = capacity_mib(count) // (2 * count + 2)
                asked = [machine.start(f"touch:{machine.path(f'asker-{j}')}", f"wait:{machine.path('go')}",
                                       f"timed:{ask}", "sleep:50", "free:1", f"timed:{ask}",
                                       shape="torch") for j in range(2)]
                for j, proc in enumerate(asked):
                    self.assertTrue(machine.wait_for(f"asker-{j}", proc))
                machine.touch("go")
                given_back = 0
                for proc in holders:
                    outcome = machine.finish(proc)
                    self.assertOk(outcome)
                    self.assertEqual(outcome.values["forked_ok"], "12", outcome.describe())
                    given_back += outcome.share["given_back"]
                self.assertGreater(given_back, 0)  # the requests were answered, by the holders' threads
                for proc in asked:
                    outcome = machine.finish(proc)
                    self.assertOk(outcome)
                    self.assertEqual(outcome.values.get("timed"), "CUDA_SUCCESS", outcome.describe())
                # Every holder is gone: nothing is charged to them any more.
                view = machine.top()["gpus"][0]
                self.assertEqual([m for m in view["members"] if m["alive"]], [], view)


class RefusalsNameTheCause(ReclaimTestCase):
    """(f) A refusal names what refused and the knob that would help; a preallocation the others' holdings
    cut short says so once, at info."""

    def test_a_per_device_limit_entry_is_named(self):
        machine = Machine(self)
        outcome = machine.finish(machine.start("timed:512", shape="torch", env={"GPUMEM_LIMIT": "0=256MiB"}))
        self.assertOk(outcome)
        self.assertEqual(outcome.values["timed"], "CUDA_ERROR_OUT_OF_MEMORY", outcome.describe())
        self.assertIn("set by GPUMEM_LIMIT's entry for device 0 (256MiB); raise that entry", outcome.err)
        self.assertNotIn("GPUMEM_MEM_FRACTION", outcome.err)

    def test_a_cluster_limit_is_named(self):
        machine = Machine(self)
        outcome = machine.finish(machine.start("timed:512", shape="torch", env={"CUDA_DEVICE_MEMORY_LIMIT_0": "256m"}))
        self.assertOk(outcome)
        self.assertEqual(outcome.values["timed"], "CUDA_ERROR_OUT_OF_MEMORY", outcome.describe())
        self.assertIn("bounded by CUDA_DEVICE_MEMORY_LIMIT_0=256m", outcome.err)
        self.assertIn("request more GPU memory for the container", outcome.err)

    def test_a_driver_refusal_is_named(self):
        # The ledger has room; the driver refuses every physical allocation (as when memory outside the
        # ledger, or fragmentation, leaves it none).
        machine = Machine(self)
        outcome = machine.finish(machine.start("timed:512", shape="torch",
                                               env={"CUDASIM_FAULTS": "cuMemCreate@1+,cuMemAlloc_v2@1+"}))
        self.assertOk(outcome)
        self.assertEqual(outcome.values["timed"], "CUDA_ERROR_OUT_OF_MEMORY", outcome.describe())
        self.assertIn("the GPU is shared, and its ledger had room", outcome.err, outcome.describe())
        self.assertNotIn("GPUMEM_SHARE_WEIGHT", outcome.err, outcome.describe())

    def test_a_preallocation_the_others_cut_short_is_said_once_at_info(self):
        machine = Machine(self)
        # The first keeps 3000 MiB of the 3968 in use; the second preallocates beside it (0.75 of its
        # 1984 MiB guarantee, not waiting): what is left holds part of it.
        first = machine.start("alloc:1000x3", f"touch:{machine.path('ready-0')}", f"wait:{machine.path('done')}",
                              shape="torch")
        self.assertTrue(machine.wait_for("ready-0", first))
        quiet = machine.finish(machine.start("alloc:16x1", shape="jax", env={"GPUMEM_SHARE_WAIT": "0"}))
        said = machine.finish(machine.start("alloc:16x1", shape="jax",
                                            env={"GPUMEM_SHARE_WAIT": "0", "GPUMEM_LOG_LEVEL": "info"}))
        machine.touch("done")
        self.assertOk(machine.finish(first))
        for outcome in (quiet, said):
            self.assertOk(outcome)
            self.assertNotIn("[warning]", outcome.err, outcome.describe())
        lines = [line for line in said.err.splitlines() if "the preallocation reserved" in line]
        self.assertEqual(len(lines), 1, said.describe())
        self.assertIn("[info]", lines[0])
        self.assertIn("the GPU is shared and the others held the rest", lines[0])


if __name__ == "__main__":
    unittest.main(verbosity=2)
