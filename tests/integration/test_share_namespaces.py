"""Members of one GPU's ledger in separate namespaces, as containers and pods on one node are
(docs/sharing.md, "Members in containers and pods"): each member runs under `unshare` in its own pid,
mount, UTS and (where said) user namespace, with the ledger's directory and the simulated device's
directory shared (CUDASIM_SHARED_DEVICES), as a hostPath volume shares them between pods.

Every member is pid 1 (or a small pid) in its namespace, so the tests check that each is named by its
identity (pid namespace, host pid, host name, POD_NAME and POD_NAMESPACE, uid) in gpumem-top's views
and in the refusal lines, and that sharing works as between plain processes: fair shares, a member
SIGKILLed from the host, 50 members in 10 namespaces joining and leaving, a member of another uid in a
group directory, a member in a user namespace, an idle member's reclaim thread woken from another
pod's namespaces (through the futex word in the shared ledger mapping), and HAMi's and MPS's limits
set per pod holding inside the share.

Namespaces that this machine does not let root create are not skipped silently: the first test asserts
for each kind either that it works or that unshare failed with "Operation not permitted"; the other
tests then use the kinds that work (the user-namespace test asserts that refusal again and ends), and
fail when pid namespaces cannot be made, without which they would test nothing.
"""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import gpumem_testlib as t
import test_share_reclaim as reclaim
from test_share import DEVICE_MIB, MiB, WORKER, Machine, Outcome, ShareTestCase, capacity_mib

KINDS = {"pid": ["--pid", "--fork"], "mount": ["--mount"], "uts": ["--uts"], "user": ["--user", "--map-root-user"]}


def probe(kind: str) -> str | None:
    """None when root may create a namespace of `kind` here; else unshare's error line."""
    result = subprocess.run(["unshare", *KINDS[kind], "true"], capture_output=True, text=True, timeout=30)
    return None if result.returncode == 0 else (result.stderr.strip() or f"exit {result.returncode}")


PROBES = {kind: probe(kind) for kind in KINDS} if shutil.which("unshare") else {}
USABLE = {kind for kind, error in PROBES.items() if error is None}


def pid_namespace_of(pid: int) -> int:
    return os.stat(f"/proc/{pid}/ns/pid").st_ino


def child_of(pid: int, timeout: float = 30) -> int:
    """The one child of process `pid` (the member unshare forked), once it has one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                children = f.read().split()
        except OSError:
            children = []
        if children:
            return int(children[0])
        time.sleep(0.005)
    raise AssertionError(f"process {pid} forked no member")


class NamespacedMachine(Machine):
    """A machine whose members each run in namespaces of their own ("pods"), named by POD_NAME,
    POD_NAMESPACE and their UTS host name; statistics go to stats-<host name>-<pid>.json (%h, %p), as
    the pid alone names several processes."""

    def __init__(self, test, ledger_dir=None):
        super().__init__(test, ledger_dir=ledger_dir)

    def start_pod(self, pod: str, *steps, kinds=("pid", "mount", "uts"), own_proc=True, env=None, shape="torch",
                  user_prefix=(), run_as=()) -> subprocess.Popen:
        """One member in namespaces `kinds`; own_proc: /proc mounted afresh in its pid namespace (a
        container's), else the host's /proc stays (its NSpid shows the host pid). user_prefix runs
        unshare (as another user: its user namespace maps that user); run_as runs the member inside the
        namespaces root made (as another user, without one)."""
        # A kind root may not create here was asserted refused by the kernel (NamespaceKinds): the member
        # goes without it. Without pid namespaces these tests would test nothing: that fails.
        self.test.assertIn("pid", USABLE, PROBES)
        kinds = [kind for kind in kinds if kind in USABLE]
        own_proc = own_proc and "mount" in kinds
        prefix = list(user_prefix) + ["unshare", "--kill-child"]
        for kind in kinds:
            prefix += KINDS[kind]
        if own_proc:
            prefix.append("--mount-proc")
        if "uts" in kinds:
            prefix += ["sh", "-c", 'hostname "$0" && exec "$@"', pod]
        prefix += list(run_as)
        extra = {"POD_NAME": pod, "POD_NAMESPACE": "team", "GPUMEM_STATS_FILE": os.path.join(self.tmp, "stats-%h-%p.json")}
        extra.update(env or {})
        return self.start(*steps, shape=shape, env=extra, prefix=tuple(prefix))

    def finish_pod(self, proc: subprocess.Popen, pod: str, pid_inside: int = 1, timeout: float = 60) -> Outcome:
        out, err = proc.communicate(timeout=timeout)
        outcome = Outcome(proc, out, err, None)
        path = os.path.join(self.tmp, f"stats-{pod}-{pid_inside}.json")
        if os.path.exists(path):
            with open(path) as f:
                devices = json.load(f)["devices"]
            outcome.stats = devices[0] if devices else None
        return outcome


class NamespaceKinds(unittest.TestCase):
    def test_each_kind_is_usable_or_refused_precisely(self):
        self.assertIsNotNone(shutil.which("unshare"), "util-linux's unshare is needed")
        self.assertEqual(os.geteuid(), 0, "the tests run as root (here and in CI)")
        for kind, error in PROBES.items():
            with self.subTest(kind=kind):
                if error is not None:  # then it must be the kernel's refusal, not anything else
                    self.assertIn("Operation not permitted", error)
        # Without pid namespaces nothing here tests what it is for.
        self.assertIn("pid", USABLE, PROBES)


class Pods(ShareTestCase):
    def start_askers_then_holder(self, machine: NamespacedMachine, count: int, wait: str, go: bool = True):
        """count - 1 pods join holding nothing; then a pod fills the device (borrowing their guarantees,
        keeping it in use), in a pid namespace whose /proc is the host's (it knows its host pid); then
        (at once, or when the file "go" is made) each asker asks for half its guarantee, waiting at most
        `wait`. Returns (askers, holder)."""
        ask = int(0.5 * capacity_mib(count) / count)
        askers = []
        for i in range(count - 1):
            proc = machine.start_pod(f"asker-{i}", "info", f"touch:{machine.path(f'ready-{i}')}",
                                     f"wait:{machine.path('go')}", f"timed:{ask}",
                                     env={"GPUMEM_SHARE_WAIT": wait})
            self.assertTrue(machine.wait_for(f"ready-{i}", proc))
            askers.append(proc)
        holder = machine.start_pod("holder", "fill:32", f"touch:{machine.path('ready-holder')}", "pause",
                                   own_proc=False)
        self.assertTrue(machine.wait_for("ready-holder", holder))
        if go:
            machine.touch("go")
        return askers, holder

    def test_refusals_and_gpumem_top_name_members_by_identity(self):
        count = 4
        machine = NamespacedMachine(self)
        askers, holder = self.start_askers_then_holder(machine, count, wait="300ms", go=False)
        holder_pid = child_of(holder.pid)
        holder_ns = pid_namespace_of(holder_pid)
        view = machine.top()
        [gpu] = view["gpus"]
        members = gpu["members"]
        self.assertEqual(len(members), count, members)
        # Every member is pid 1 in its own pid namespace; gpumem-top (in the host's) tells them apart.
        self.assertEqual(sorted(m["pid"] for m in members), [1] * count)
        self.assertEqual(len({m["pid_namespace"] for m in members}), count)
        asker_pids = {f"asker-{i}": child_of(proc.pid) for i, proc in enumerate(askers)}
        expected = {**asker_pids, "holder": holder_pid}
        for m in members:
            self.assertEqual(m["pod_name"], m["hostname"], m)
            self.assertEqual(m["pod_namespace"], "team", m)
            self.assertEqual(m["pid_here"], expected[m["pod_name"]], m)
            self.assertEqual(m["pid_namespace"], pid_namespace_of(expected[m["pod_name"]]), m)
            self.assertEqual(m["uid"], 0, m)
        by_pod = {m["pod_name"]: m for m in members}
        self.assertEqual(by_pod["holder"]["host_pid"], holder_pid)  # it saw the host's /proc
        self.assertIsNone(by_pod["asker-0"]["host_pid"])  # its own /proc shows its pid alone
        # Max-min fairness: the capacity split, nobody below min(its demand, an equal part).
        self.assertEqual(sum(m["guarantee"] for m in members), gpu["capacity"])
        for m in members:
            demand = gpu["capacity"] if m["demand"] is None else m["demand"]
            self.assertGreaterEqual(m["guarantee"], min(demand, gpu["capacity"] // count) - count, m)
        # The text view: the host pids, and who each is.
        text = subprocess.run([sys.executable, os.path.join(t.source_root(), "scripts", "gpumem-top"), "--once",
                               "--dir", machine.ledger_dir], capture_output=True, text=True, timeout=30)
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertRegex(text.stdout, rf"(?m)^ +1 +{holder_pid} +{WORKER} .* pod team/holder, .*uid 0$")
        machine.touch("go")
        # The refusal lines: each names the holder by its namespace, host pid and pod, and itself apart.
        for i, proc in enumerate(askers):
            outcome = machine.finish_pod(proc, f"asker-{i}")
            self.assertOk(outcome)
            self.assertEqual(outcome.values["timed"], "CUDA_ERROR_OUT_OF_MEMORY", outcome.describe())
            [line] = [line for line in outcome.err.splitlines() if "processes share" in line]
            self.assertIn(f'pid 1 in pid namespace {holder_ns} (host pid {holder_pid}) ({WORKER}; pod "team/holder", '
                          f'host "holder", ', line)
            self.assertIn(f'pid 1 ({WORKER}, this process; pod "team/asker-{i}", host "asker-{i}", ', line)
            self.assertNotIn(f"pid 1 ({WORKER}) holds", line)  # the old, ambiguous form
        holder.kill()
        holder.communicate()

    def test_a_member_sigkilled_from_the_host_frees_its_charge(self):
        count = 4
        machine = NamespacedMachine(self)
        askers, holder = self.start_askers_then_holder(machine, count, wait="30s")
        time.sleep(0.4)
        holder_pid = child_of(holder.pid)
        os.kill(holder_pid, signal.SIGKILL)  # the member itself, by the pid the host sees
        holder.communicate()
        for i, proc in enumerate(askers):
            outcome = machine.finish_pod(proc, f"asker-{i}")
            self.assertOk(outcome)
            self.assertEqual(outcome.values["timed"], "CUDA_SUCCESS", outcome.describe())
            self.assertGreater(float(outcome.values["took_ms"]), 300, outcome.describe())
            self.assertLess(float(outcome.values["took_ms"]), 5000, outcome.describe())
        members = machine.top()["gpus"][0]["members"]
        dead = [m for m in members if not m["alive"]]
        self.assertTrue(all(m["pod_name"] != "holder" for m in members if m["alive"]), members)
        for m in dead:
            self.assertEqual((m["held"], m["pid_here"]), (0, None), m)

    def test_50_members_in_10_namespaces_join_and_leave(self):
        machine = NamespacedMachine(self)
        worker = t.program_path(WORKER)
        started = time.monotonic()
        pods = []
        for i in range(10):
            # Five members in each pod's pid namespace (pids 2 to 6 there, the shell being 1).
            script = ("for j in 1 2 3 4 5; do \"$0\" alloc:8x1 touch:\"$1\"/ready-\"$2\"-$j wait:\"$1\"/go free:1 "
                      "alloc:4x1 info & done; wait")
            env = machine.env("torch", {"POD_NAME": f"pod-{i}", "POD_NAMESPACE": "team",
                                        "CUDASIM_CONTEXT_OVERHEAD": "16MiB",
                                        "GPUMEM_STATS_FILE": os.path.join(machine.tmp, "stats-%h-%p.json")})
            own = ["--mount-proc"] * ("mount" in USABLE) + ["--uts"] * ("uts" in USABLE)
            name = f"hostname pod-{i} && " if "uts" in USABLE else ""
            argv = ["unshare", "--kill-child", "--pid", "--fork", *own, "sh", "-c",
                    f'{name}exec sh -c \'{script}\' "$@"', "sh", worker, machine.tmp, str(i)]
            proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    errors="replace")
            machine.procs.append(proc)
            pods.append(proc)
        deadline = time.monotonic() + 120
        while len(glob.glob(machine.path("ready-*"))) < 50:
            self.assertLess(time.monotonic(), deadline, "the 50 members never all joined")
            for proc in pods:
                if proc.poll() is not None:
                    self.fail(f"a pod ended early: {proc.communicate()}")
            time.sleep(0.01)
        joined = time.monotonic() - started
        view = machine.top()
        [gpu] = view["gpus"]
        alive = [m for m in gpu["members"] if m["alive"]]
        self.assertEqual(len(alive), 50)
        self.assertEqual(len({m["pid_namespace"] for m in alive}), 10)
        self.assertEqual(len({(m["pid_namespace"], m["pid"]) for m in alive}), 50)
        self.assertLessEqual(len({m["pid"] for m in alive}), 10)  # the same few pids in every namespace
        # Each resolved to a distinct process of this namespace, which is in the pid namespace recorded.
        here = [m["pid_here"] for m in alive]
        self.assertEqual(len(set(here)), 50, alive)
        for m in alive:
            self.assertEqual(pid_namespace_of(m["pid_here"]), m["pid_namespace"], m)
            if "uts" in USABLE:
                self.assertEqual(m["hostname"], m["pod_name"], m)
        self.assertEqual(sorted({m["pod_name"] for m in alive}), sorted(f"pod-{i}" for i in range(10)))
        machine.touch("go")
        for proc in pods:
            out, err = proc.communicate(timeout=120)
            self.assertEqual(proc.returncode, 0, err)
            self.assertEqual(out.count("result=ok"), 5, out + err)
        if "uts" in USABLE:
            stats = glob.glob(machine.path("stats-pod-*.json"))
            self.assertEqual(len(stats), 50)  # %h and %p together name each member apart
        view = machine.top()
        self.assertEqual([m for m in view["gpus"][0]["members"] if m["alive"]], [])
        self.assertEqual(view["gpus"][0]["held"], 0)
        took = time.monotonic() - started
        print(f"50 members in 10 namespaces: all joined after {joined:.1f} s, all done after {took:.1f} s",
              file=sys.stderr)
        self.assertLess(took, 90)


class ReclaimAcrossPods(reclaim.ReclaimTestCase):
    """An idle borrower in a pod of its own (test_share_reclaim.py (b), across namespaces): it borrowed
    most of the device, freed every block and makes no CUDA call; a newcomer in another pod asks for 0.9
    of its guarantee, which only the holder's idle memory can hold. The holder's reclaim thread, in
    another pid namespace, is woken through the futex word of the ledger both map (tens of ms here;
    its own look every 250 ms would also come within the bound, which only a thread that does not
    answer misses)."""

    def test_an_idle_holder_in_another_pod_gives_back(self):
        count = 2
        machine = NamespacedMachine(self)
        most = int(0.9 * capacity_mib(count))
        holder = machine.start_pod("holder", f"alloc:{most // 8}x8", "free:8", f"touch:{machine.path('ready')}",
                                   f"wait:{machine.path('done')}")
        self.assertTrue(machine.wait_for("ready", holder))
        [member] = machine.top()["gpus"][0]["members"]
        self.assertEqual((member["pid"], member["pid_namespace"]), (1, pid_namespace_of(child_of(holder.pid))))
        self.assertNotEqual(member["pid_namespace"], pid_namespace_of(os.getpid()))
        ask = int(0.9 * reclaim.share_mib(count))
        self.assertGreater(ask, capacity_mib(count) - most)  # the free memory alone cannot hold it
        newcomer = machine.finish_pod(machine.start_pod("newcomer", f"timed:{ask}"), "newcomer")
        self.assertCameInTime(newcomer)
        self.assertEqual(newcomer.share["members_at_join"], count, newcomer.describe())
        # Given back while the holder still waits for its file: its own thread did it, not its exit.
        held = {m["pod_name"]: m["held"] for m in machine.top()["gpus"][0]["members"] if m["alive"]}
        self.assertLessEqual(held["holder"], (capacity_mib(count) - ask) * MiB, held)
        machine.touch("done")
        lent = machine.finish_pod(holder, "holder")
        self.assertOk(lent)
        self.assertGreaterEqual(lent.share["given_back"], (ask - (capacity_mib(count) - most)) * MiB, lent.describe())
        print(f"reclaim across pods: the newcomer's {ask} MiB came in {newcomer.values['took_ms']} ms",
              file=sys.stderr)


class ClusterLimitsPerPod(ShareTestCase):
    """HAMi's and MPS's limits, each set for one pod (docs/kubernetes.md), hold inside the share: each
    pod is refused beyond its own limit with the line naming its variable, its guarantee and budget
    never exceed the limit, and an unlimited pod may use what the limited ones cannot."""

    # pod: (variable, value, its limit in MiB, the refusal's words: the bound (device 0's entry) and advice)
    LIMITED = {
        "hami": ("CUDA_DEVICE_MEMORY_LIMIT_0", "256m", 256,
                 ("bounded by CUDA_DEVICE_MEMORY_LIMIT_0=256m", "request more GPU memory for the container")),
        "mps": ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=512M", 512,
                ("bounded by CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=512M", "raise it where the MPS client starts")),
    }

    def assertWithinLimits(self, machine: NamespacedMachine, pods: int) -> dict:
        [gpu] = machine.top()["gpus"]
        by_pod = {m["pod_name"]: m for m in gpu["members"] if m["alive"]}
        self.assertEqual(len(by_pod), pods, gpu)
        self.assertLessEqual(sum(m["guarantee"] for m in by_pod.values()), gpu["capacity"], gpu)
        for pod, (_, _, limit, _) in self.LIMITED.items():
            self.assertLessEqual(max(by_pod[pod]["guarantee"], by_pod[pod]["budget"]), limit * MiB, by_pod[pod])
        return by_pod

    def test_hami_and_mps_limits_hold_inside_the_share(self):
        machine = NamespacedMachine(self)
        limited = {}
        for pod, (variable, value, limit, _) in self.LIMITED.items():
            # Half its limit; then a block that takes it 64 MiB past it.
            limited[pod] = machine.start_pod(pod, f"alloc:{limit // 2}x1", f"timed:{limit // 2 + 64}",
                                             f"touch:{machine.path(f'ready-{pod}')}", f"wait:{machine.path('done')}",
                                             env={variable: value})
            self.assertTrue(machine.wait_for(f"ready-{pod}", limited[pod]))
        self.assertWithinLimits(machine, 2)
        # What the limited pods cannot use: all the rest, far beyond an equal third.
        capacity = capacity_mib(3)
        rest = capacity - sum(limit for _, _, limit, _ in self.LIMITED.values()) - 64
        self.assertGreater(rest, 2 * capacity // 3)
        other = machine.start_pod("unlimited", f"timed:{rest}", f"touch:{machine.path('ready-unlimited')}",
                                  f"wait:{machine.path('done')}", env={"GPUMEM_SHARE_WAIT": "0"})
        self.assertTrue(machine.wait_for("ready-unlimited", other))
        by_pod = self.assertWithinLimits(machine, 3)
        # Its guarantee, not only borrowed memory: max-min fairness gives it what the limits leave.
        self.assertGreaterEqual(by_pod["unlimited"]["guarantee"], rest * MiB, by_pod)
        self.assertGreaterEqual(by_pod["unlimited"]["held"], rest * MiB, by_pod)
        machine.touch("done")
        outcome = machine.finish_pod(other, "unlimited")
        self.assertOk(outcome)
        self.assertEqual(outcome.values["timed"], "CUDA_SUCCESS", outcome.describe())
        for pod, (_, _, limit, (bound, advice)) in self.LIMITED.items():
            outcome = machine.finish_pod(limited[pod], pod)
            self.assertOk(outcome)
            self.assertEqual(outcome.values["timed"], "CUDA_ERROR_OUT_OF_MEMORY", outcome.describe())
            # The report's cause: one line, naming its limit (the report's limit line names it again).
            lines = [line for line in outcome.err.splitlines() if line.startswith("the GPU is shared")]
            self.assertEqual(len(lines), 1, outcome.describe())
            self.assertIn("this process holds", lines[0])
            self.assertIn(f"of the most it may hold: {bound}", lines[0])
            self.assertIn(advice, lines[0])
            self.assertNotIn("GPUMEM_SHARE_WEIGHT", lines[0])  # its limit refused it, not the share
            self.assertLessEqual(outcome.share["guarantee"], limit * MiB, outcome.describe())


class OtherUsers(ShareTestCase):
    NOBODY = 65534

    def group_machine(self) -> NamespacedMachine:
        group_dir = tempfile.mkdtemp(prefix="gpumem-group-")
        self.addCleanup(shutil.rmtree, group_dir, True)
        os.chown(group_dir, 0, self.NOBODY)
        os.chmod(group_dir, 0o2770)
        machine = NamespacedMachine(self, ledger_dir=group_dir)
        machine.open_to_other_users()
        return machine

    def test_a_member_of_another_uid_in_a_group_directory(self):
        self.assertIsNotNone(shutil.which("setpriv"), "setpriv (util-linux) runs a process as another user")
        machine = self.group_machine()
        nobody = ("setpriv", f"--reuid={self.NOBODY}", f"--regid={self.NOBODY}", "--clear-groups")
        other = machine.start_pod("other-user", "alloc:256x1", f"touch:{machine.path('ready-other')}",
                                  f"wait:{machine.path('done')}", kinds=("pid", "uts"), own_proc=False,
                                  run_as=nobody)
        self.assertTrue(machine.wait_for("ready-other", other))
        mine = machine.start_pod("root-user", "alloc:256x1", f"touch:{machine.path('ready-mine')}",
                                 f"wait:{machine.path('done')}")
        self.assertTrue(machine.wait_for("ready-mine", mine))
        by_pod = {m["pod_name"]: m for m in machine.top()["gpus"][0]["members"]}
        self.assertEqual((by_pod["other-user"]["uid"], by_pod["root-user"]["uid"]), (self.NOBODY, 0))
        self.assertTrue(all(m["alive"] and m["held"] >= 256 * MiB for m in by_pod.values()), by_pod)
        machine.touch("done")
        theirs, ours = machine.finish_pod(other, "other-user"), machine.finish_pod(mine, "root-user")
        self.assertOk(theirs)
        self.assertOk(ours)
        self.assertEqual(ours.share["members_at_join"], 2)
        ledger = glob.glob(os.path.join(machine.ledger_dir, "gpu-*.ledger"))[0]
        self.assertEqual((os.stat(ledger).st_mode & 0o777, os.stat(ledger).st_gid), (0o660, self.NOBODY))

    def test_user_namespaces(self):
        if "user" not in USABLE:  # the kernel's refusal, asserted precisely; nothing more to test here
            self.assertIn("Operation not permitted", PROBES["user"])
            return
        # Root mapped to root: the directory is root's as the member sees it; it joins, its uid is 0 in a
        # user namespace of its own.
        machine = NamespacedMachine(self)
        member = machine.start_pod("userns", "alloc:64x1", f"touch:{machine.path('ready')}",
                                   f"wait:{machine.path('done')}", kinds=("user", "pid", "mount", "uts"))
        self.assertTrue(machine.wait_for("ready", member))
        [m] = machine.top()["gpus"][0]["members"]
        self.assertEqual((m["pod_name"], m["uid"], m["pid"]), ("userns", 0, 1))
        self.assertNotEqual(m["user_namespace"], os.stat("/proc/self/ns/user").st_ino)
        self.assertEqual(m["user_namespace"], os.stat(f"/proc/{m['pid_here']}/ns/user").st_ino)
        machine.touch("done")
        self.assertOk(machine.finish_pod(member, "userns"))
        # Another user mapped to root inside: the group directory's owner, root outside, is no one
        # there (the overflow uid), so the directory is no group directory as the member sees it: it is
        # refused with one line and the member runs unshared.
        machine = self.group_machine()
        nobody = ("setpriv", f"--reuid={self.NOBODY}", f"--regid={self.NOBODY}", "--clear-groups")
        outcome = machine.finish_pod(machine.start_pod("mapped", "alloc:64x1", kinds=("user", "pid", "uts"),
                                                       own_proc=False, user_prefix=nobody), "mapped")
        self.assertOk(outcome)
        lines = [line for line in outcome.err.splitlines() if "GPUMEM_SHARE_DIR" in line]
        self.assertEqual(len(lines), 1, outcome.describe())
        self.assertIn(f"belongs to uid {self.NOBODY}, not to this user (uid 0)", lines[0])
        self.assertIsNotNone(outcome.stats, outcome.describe())
        self.assertIsNone(outcome.stats.get("share"), outcome.describe())


if __name__ == "__main__":
    unittest.main(verbosity=2)
