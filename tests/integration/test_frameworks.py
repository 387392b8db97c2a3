"""Frameworks as tenants (docs/frameworks.md): JAX-, TensorFlow-, PyTorch- and CuPy-shaped processes
(tests/integration/programs/framework_*.cpp, each managing memory as its framework's allocator does,
from that framework's variables) under gpumem, alone and side by side on one simulated device that the
processes really share (CUDASIM_SHARED_DEVICES).

What is checked: libgpumem.so switches each framework to allocate on demand when it is loaded
(the variables a process sees, in a child, with GPUMEM_FRAMEWORKS=off and GPUMEM_MODE=off); the
user's fraction and limit apply once, in gpumem (its limit and preallocation, the framework's own
pool none); the JAX page's cases (several JAX processes, JAX beside TensorFlow, PyTorch beside JAX,
CuPy beside JAX) all finish under sharing where the sum of their live peaks fits, through gpumem-run
--share and through LD_PRELOAD with GPUMEM_SHARE=auto; and each case as it was before, with
GPUMEM_FRAMEWORKS=off (the framework's allocator on top of gpumem's): what each process got, and that
it does not all fit.
"""
import os
import subprocess
import sys
import tempfile
import unittest

import gpumem_testlib as t
from test_share import Machine, Outcome, ShareTestCase

MiB = 1 << 20
GiB = 1 << 30
DEVICE_GIB = 16
CONTEXT_MIB = 300  # the simulator's context overhead (CUDASIM_CONTEXT_OVERHEAD's default)
SWITCHES = {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform", "TF_GPU_ALLOCATOR": "cuda_malloc",
            "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
PROGRAMS = {"jax": "framework_xla", "tf": "framework_tf", "torch": "framework_torch", "cupy": "framework_cupy"}
BEFORE = {"GPUMEM_FRAMEWORKS": "off"}


def capacity_bytes(processes: int) -> int:
    """What the members of a shared device share: the device less every context and room for one more."""
    return DEVICE_GIB * GiB - CONTEXT_MIB * MiB * (processes + 1)


def environment_of(argv, env: dict) -> dict:
    """The environment a program sees under the shim: `env` printed by itself under LD_PRELOAD."""
    full = t.clean_environment()
    full.update({"LD_PRELOAD": t.shim_path()})
    full.update(env)
    result = subprocess.run(argv, env=full, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise AssertionError(f"{argv}: exit {result.returncode}\n{result.stderr}")
    return dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)


class FrameworkMachine(Machine):
    """A simulated machine of one 16 GiB device, shared by the processes started on it (sharing through
    gpumem with `share`), running the framework-shaped programs."""

    def env(self, shape: str = "jax", extra: dict | None = None) -> dict:
        env = t.clean_environment()
        env.update({
            "LD_LIBRARY_PATH": t.sim_dir(),
            "LD_PRELOAD": t.shim_path(),
            "CUDASIM_SHARED_DEVICES": self.sim_dir,
            "CUDASIM_DEVICE_MEMORY": f"{DEVICE_GIB}GiB",
            "GPUMEM_STATS_FILE": os.path.join(self.tmp, "stats-%p.json"),
        })
        if self.share:
            env.update({"GPUMEM_SHARE": "auto", "GPUMEM_SHARE_DIR": self.ledger_dir})
        env.update(extra or {})
        return env

    def start(self, *steps, shape: str = "jax", env: dict | None = None, prefix: tuple = ()):
        argv = list(prefix) + [t.program_path(PROGRAMS[shape])] + [str(s) for s in steps]
        proc = subprocess.Popen(argv, env=self.env(shape, env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, errors="replace")
        self.procs.append(proc)
        return proc

    def wrapper(self) -> tuple:
        """gpumem-run --share, as the user runs it (the simulator's sharing is the test's own folder)."""
        return (os.path.join(t.build_root(), "scripts", "gpumem-run"), "--share", "--share-dir", self.ledger_dir,
                "--")


class FrameworkTestCase(ShareTestCase):
    def run_alone(self, shape: str, *steps, env: dict | None = None) -> Outcome:
        machine = FrameworkMachine(self, share=False)
        return machine.finish(machine.start(*steps, shape=shape, env=env))

    def run_side_by_side(self, shapes, live_bytes, env=None, wrapper=False, share=True, first_steps=None) -> list:
        """Starts one process per shape in turn, each holding its live bytes (8 buffers) through a
        training loop, until every one of them is running; then lets them finish. `first_steps` maps a
        shape to the steps its processes run first (a program's own setting). Returns their outcomes."""
        machine = FrameworkMachine(self, share=share)
        prefix = machine.wrapper() if wrapper and share else ()
        mib = live_bytes // MiB // 8
        procs = []
        for i, shape in enumerate(shapes):
            proc = machine.start(*(first_steps or {}).get(shape, ()), f"alloc:{mib}x8", f"touch:{machine.path(f'ready-{i}')}",
                                 f"churn:@{machine.path('done')}", "report", shape=shape, env=env, prefix=prefix)
            procs.append(proc)
            machine.wait_for(f"ready-{i}", proc)
        machine.touch("done")
        return [machine.finish(proc) for proc in procs]

    def assertAllFinished(self, outcomes):
        for outcome in outcomes:
            self.assertOk(outcome)

    def assertOnDemand(self, outcome: Outcome):
        """The framework held from the driver exactly what was live: no pool of its own."""
        self.assertEqual(outcome.values["framework_limit"], "0", outcome.describe())
        self.assertEqual(outcome.values["framework_peak_reserved"], outcome.values["peak_live"], outcome.describe())


class Switches(FrameworkTestCase):
    """What libgpumem.so sets when it is loaded, and what it leaves alone."""

    def test_each_framework_is_switched_and_the_user_s_values_kept(self):
        seen = environment_of(["env"], {"XLA_PYTHON_CLIENT_ALLOCATOR": "cuda_async", "CUPY_GPU_MEMORY_LIMIT": "50%",
                                        "XLA_PYTHON_CLIENT_MEM_FRACTION": ".5"})
        for name, value in SWITCHES.items():
            self.assertEqual(seen.get(name), value, name)
        self.assertEqual(seen["CUPY_GPU_MEMORY_LIMIT"], "0")
        self.assertEqual(seen["GPUMEM_SAVED_XLA_PYTHON_CLIENT_ALLOCATOR"], "cuda_async")
        self.assertEqual(seen["GPUMEM_SAVED_CUPY_GPU_MEMORY_LIMIT"], "50%")
        self.assertNotIn("GPUMEM_SAVED_TF_GPU_ALLOCATOR", seen)  # the user did not set it
        self.assertEqual(seen["XLA_PYTHON_CLIENT_MEM_FRACTION"], ".5")  # read by gpumem; JAX, switched, ignores it
        self.assertEqual(seen["GPUMEM_FRAMEWORKS_SET"],
                         "XLA_PYTHON_CLIENT_ALLOCATOR=platform,TF_GPU_ALLOCATOR=cuda_malloc,"
                         "PYTORCH_NO_CUDA_MEMORY_CACHING=1,CUPY_GPU_MEMORY_LIMIT=0")
        # CuPy's cap is replaced only when the user set one.
        self.assertNotIn("CUPY_GPU_MEMORY_LIMIT", environment_of(["env"], {}))

    def test_a_child_inherits_the_switches_and_changes_nothing(self):
        seen = environment_of(["sh", "-c", "XLA_PYTHON_CLIENT_ALLOCATOR=platform exec env"],
                              {"XLA_PYTHON_CLIENT_ALLOCATOR": "bfc"})
        # The shell switched it and saved "bfc"; the child found GPUMEM_FRAMEWORKS_SET and left both alone.
        self.assertEqual(seen["GPUMEM_SAVED_XLA_PYTHON_CLIENT_ALLOCATOR"], "bfc")
        self.assertEqual(seen["XLA_PYTHON_CLIENT_ALLOCATOR"], "platform")

    def test_nothing_is_switched_with_gpumem_frameworks_off_or_gpumem_off(self):
        for env in ({"GPUMEM_FRAMEWORKS": "off"}, {"GPUMEM_FRAMEWORKS": " False "}, {"GPUMEM_MODE": "OFF"}):
            with self.subTest(**env):
                seen = environment_of(["env"], env)
                for name in list(SWITCHES) + ["GPUMEM_FRAMEWORKS_SET"]:
                    self.assertNotIn(name, seen)
        # A value that is not a boolean leaves them on (the policy says so in one line).
        self.assertEqual(environment_of(["env"], {"GPUMEM_FRAMEWORKS": "maybe"})["TF_GPU_ALLOCATOR"], "cuda_malloc")

    def test_a_python_program_sees_them_in_os_environ(self):
        seen = environment_of([sys.executable, "-c", "import os; print('\\n'.join(f'{k}={v}' for k, v in "
                                                     "os.environ.items()))"], {})
        for name, value in SWITCHES.items():
            self.assertEqual(seen.get(name), value, name)

    def test_a_variable_changed_after_the_switch_is_said_and_read_as_it_is(self):
        # As os.environ["XLA_PYTHON_CLIENT_ALLOCATOR"] = "bfc" before `import jax`: JAX's own arena is
        # back, on top of gpumem's, and gpumem says so.
        outcome = self.run_alone("jax", "setenv:XLA_PYTHON_CLIENT_ALLOCATOR=bfc", "alloc:64x1")
        self.assertOk(outcome)
        self.assertEqual(outcome.values["framework_allocator"], "bfc", outcome.describe())
        self.assertIn("gpumem: XLA_PYTHON_CLIENT_ALLOCATOR is \"bfc\", not \"platform\" as libgpumem.so set it",
                      outcome.err)


class Alone(FrameworkTestCase):
    """One process of each framework alone on the device: the user's values apply once, in gpumem."""

    def test_jax_fraction_applies_once(self):
        for fraction in ("0.5", None):
            with self.subTest(fraction=fraction):
                env = {"XLA_PYTHON_CLIENT_MEM_FRACTION": fraction} if fraction else {}
                expected = float(fraction or 0.75) * DEVICE_GIB * GiB
                after = self.run_alone("jax", "alloc:256x4", "report", env=env)
                self.assertOk(after)
                self.assertEqual(after.values["framework_allocator"], "platform")
                self.assertOnDemand(after)
                self.assertEqual(after.stats["limit"], expected, after.describe())
                self.assertGreaterEqual(after.stats["peak_reserved"], expected, after.describe())  # preallocated
                # Before: JAX's arena took the fraction of what gpumem reported, which was the fraction.
                before = self.run_alone("jax", "alloc:256x4", "report", env={**env, **BEFORE})
                self.assertOk(before)
                self.assertEqual(before.values["framework_allocator"], "bfc")
                self.assertEqual(int(before.values["framework_total_seen"]), expected)
                self.assertAlmostEqual(int(before.values["framework_limit"]) / (DEVICE_GIB * GiB),
                                       float(fraction or 0.75) ** 2, places=3)

    def test_jax_preallocation_off_is_gpumem_s(self):
        after = self.run_alone("jax", "alloc:256x4", "report", env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
        self.assertOk(after)
        self.assertOnDemand(after)
        self.assertLess(after.stats["peak_reserved"], 2 * GiB, after.describe())  # grew, did not preallocate

    def test_tensorflow_allocates_each_tensor_through_gpumem(self):
        after = self.run_alone("tf", "alloc:256x4", "free:4", "report")
        self.assertOk(after)
        self.assertEqual(after.values["framework_allocator"], "cuda_malloc")
        self.assertOnDemand(after)
        # Before: TensorFlow preallocated what gpumem said was free, less its reserve for the system.
        before = self.run_alone("tf", "alloc:256x4", "free:4", "report", env=BEFORE)
        self.assertOk(before)
        self.assertEqual(before.values["framework_allocator"], "bfc")
        self.assertGreater(int(before.values["framework_reserved"]), 8 * GiB, before.describe())

    def test_pytorch_frees_what_it_frees(self):
        after = self.run_alone("torch", "alloc:512x4", "free:4", "report")
        self.assertOk(after)
        self.assertEqual(after.values["framework_allocator"], "uncached")
        self.assertEqual(after.values["framework_reserved"], "0")
        before = self.run_alone("torch", "alloc:512x4", "free:4", "report", env=BEFORE)
        self.assertOk(before)
        self.assertEqual(before.values["framework_allocator"], "caching")
        self.assertGreaterEqual(int(before.values["framework_reserved"]), 2 * GiB)  # cached, held from gpumem

    def test_cupy_cap_applies_once(self):
        # 25% of the device: gpumem's limit; CuPy's pool is told none.
        after = self.run_alone("cupy", "alloc:512x6", "alloc:512x4", env={"CUPY_GPU_MEMORY_LIMIT": "25%"})
        self.assertEqual(after.values.get("result"), "oom", after.describe())
        self.assertEqual(after.values["framework_limit"], "0")
        self.assertEqual(after.stats["limit"], DEVICE_GIB * GiB // 4)
        # Refused by gpumem at its limit: the blocks that fit under 4 GiB, not one more.
        held = int(after.values["refused_at"]) * MiB
        self.assertLessEqual(held, DEVICE_GIB * GiB // 4)
        self.assertGreater(held + 512 * MiB, DEVICE_GIB * GiB // 4)
        # Before: 25% of what gpumem reported, 0.75 of the device.
        before = self.run_alone("cupy", "report", "alloc:512x1", env={"CUPY_GPU_MEMORY_LIMIT": "25%", **BEFORE})
        self.assertOk(before)
        self.assertEqual(int(before.values["framework_limit"]), int(0.25 * 0.75 * DEVICE_GIB * GiB))

    def test_cupy_without_its_pool(self):
        outcome = self.run_alone("cupy", "allocator:none", "alloc:512x4", "free:4", "report")
        self.assertOk(outcome)
        self.assertEqual(outcome.values["framework_allocator"], "none")
        self.assertEqual(outcome.values["framework_reserved"], "0")

    def test_pytorch_s_async_backend_is_served_by_gpumem(self):
        outcome = self.run_alone("torch", "alloc:256x4", "report",
                                 env={"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"})
        self.assertOk(outcome)
        self.assertEqual(outcome.values["framework_allocator"], "cudaMallocAsync")
        self.assertGreaterEqual(outcome.stats["peak_in_use"], GiB, outcome.describe())


class TraceReplay(FrameworkTestCase):
    """The trace step bench/frameworks.sh times: a replay-log CSV through the framework's allocator."""

    def test_each_framework_replays_a_trace_with_and_without_the_switch(self):
        rows = ["Thread,Time,Action,Pointer,Size,Stream,Device",
                "1,0.1,allocate,0x1000,1048576,0,0", "1,0.2,allocate,0x2000,300,0,0",
                "1,0.3,allocate failure,0x0,99999999999,0,0", "1,0.4,free,0x1000,1048576,0,0",
                "1,0.5,allocate,0x1000,4194304,0,0", "1,0.6,free,0x2000,300,0,0", "1,0.7,free,0x1000,4194304,0,0"]
        with tempfile.TemporaryDirectory() as folder:
            trace = os.path.join(folder, "trace.csv")
            with open(trace, "w") as f:
                f.write("\n".join(rows) + "\n")
            for shape in PROGRAMS:
                for env in ({}, BEFORE):
                    with self.subTest(shape=shape, **env):
                        outcome = self.run_alone(shape, f"trace:{trace}", env=env)
                        self.assertOk(outcome)
                        self.assertEqual(outcome.values["trace_ops"], "6", outcome.describe())  # the refusal left out
                        self.assertGreater(float(outcome.values["trace_ns_per_op"]), 0)
                        self.assertEqual(outcome.values["live"], "0", outcome.describe())
            missing = self.run_alone("jax", f"trace:{os.path.join(folder, 'absent.csv')}")
            self.assertEqual(missing.returncode, 2, missing.describe())
            self.assertIn("cannot read the trace", missing.err)


class SideBySide(FrameworkTestCase):
    """The JAX page's cases, with default settings, on one 16 GiB device the processes share."""

    def check_case(self, shapes, live_bytes, wrapper=False, first_steps=None):
        outcomes = self.run_side_by_side(shapes, live_bytes, wrapper=wrapper, first_steps=first_steps)
        self.assertAllFinished(outcomes)
        for shape, outcome in zip(shapes, outcomes):
            self.assertOnDemand(outcome)
            self.assertIsNotNone(outcome.stats["share"], outcome.describe())
        # The first preallocated 0.75 of its guarantee alone (the whole capacity), then gave idle memory back.
        first = outcomes[0].share
        self.assertEqual(first["members_at_join"], 1)
        self.assertGreater(first["given_back"], 0, outcomes[0].describe())
        return outcomes

    def before(self, shapes, live_bytes):
        """The same case with the frameworks' own allocators (GPUMEM_FRAMEWORKS=off): some process fails."""
        # A refusal inside the guarantee waits for borrowers; the frameworks' arenas, held whole, give
        # nothing back, so each of a preallocation's back-off tries would wait the full 5 s.
        machine_env = {**BEFORE, "GPUMEM_SHARE_WAIT": "50ms"}
        outcomes = self.run_side_by_side(shapes, live_bytes, env=machine_env)
        self.assertTrue([o for o in outcomes if o.returncode != 0], "every process fitted with two allocators")
        return outcomes

    def test_two_jax_processes_of_6_gib_each(self):
        shapes = ("jax", "jax")
        self.check_case(shapes, 6 * GiB, wrapper=True)
        outcomes = self.before(shapes, 6 * GiB)
        # The first's arena took 0.75 of what it was told (its share alone); the second was told the rest
        # of the device and its arena took 0.75 of that, less than its 6 GiB.
        self.assertOk(outcomes[0])
        self.assertEqual(outcomes[1].values.get("result"), "oom", outcomes[1].describe())
        self.assertLess(int(outcomes[1].values["framework_limit"]), 6 * GiB)

    def test_four_jax_processes(self):
        live = int(0.7 * capacity_bytes(4) / 4)
        self.check_case(("jax",) * 4, live)
        self.before(("jax",) * 4, live)

    def test_jax_beside_tensorflow(self):
        self.check_case(("jax", "tf"), 6 * GiB)
        self.before(("jax", "tf"), 6 * GiB)

    def test_pytorch_beside_jax(self):
        self.check_case(("torch", "jax"), 6 * GiB)
        self.before(("torch", "jax"), 6 * GiB)

    def test_cupy_beside_jax(self):
        # CuPy has no variable that turns its pool off: the program calls cupy.cuda.set_allocator(None).
        self.check_case(("cupy", "jax"), 6 * GiB, first_steps={"cupy": ("allocator:none",)})

    def test_cupy_s_pool_beside_jax(self):
        # With its pool, a CuPy program that reuses its cached blocks never calls gpumem again: the
        # memory its arena preallocated alone goes back through the reclaim thread (docs/sharing.md),
        # while the blocks CuPy's pool caches stay with it (docs/frameworks.md, limits).
        outcomes = self.run_side_by_side(("cupy", "jax"), 6 * GiB)
        self.assertAllFinished(outcomes)
        self.assertEqual(outcomes[0].values["framework_allocator"], "pool")
        self.assertGreaterEqual(int(outcomes[0].values["framework_peak_reserved"]), 6 * GiB)

    def test_without_the_wrapper(self):
        # The documented equivalent of gpumem-run --share: LD_PRELOAD and GPUMEM_SHARE=auto (the machine's).
        self.check_case(("jax", "tf", "torch"), int(0.7 * capacity_bytes(3) / 3))


if __name__ == "__main__":
    unittest.main()
