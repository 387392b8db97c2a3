#!/usr/bin/env python3
"""What sharing one GPU costs and how the shares move (GPUMEM_SHARE=auto, docs/sharing.md), measured
over the simulator with a device shared between processes, from a build dir:

  1. joining: the ledger join of a process (join_us of its exit statistics) beside 0, 1, 7 and 31
     other members;
  2. the fast path: a 4 KiB cuMemAlloc + cuMemFree pair served by the arena from memory it holds,
     without and with sharing (bench/shim_cost), and the ledger updates of 10k and 100k pairs;
  3. one growth step: an 8 MiB allocation of a growing (vmm) arena, 4 granules each reserved in the
     ledger, without and with sharing, and the ledger's own reserve + give-back
     (bench/share_bench, with 1 to 256 members);
  4. fairness: each process's reserved bytes and budget over time in two scenarios of
     tests/integration/test_share.py ((c) a greedy process beside three others, (d) idle memory
     borrowed and given back), from the processes' traces, drawn by scripts/gpumem-plot;
  5. alone on the device: examples/alloc_churn without and with sharing, the driver allocations it
     made and its time in allocation calls (exit statistics), with the driver answering at once and
     with CUDASIM_LATENCY=published;
  6. reclaim from idle members: how long B's cuMemAlloc takes when the memory it needs is held by a
     process that makes no CUDA call any more (an idle preallocated lender; an idle borrower after its
     frees), and B alone for comparison. With --reclaim-only, this section alone (it runs against a
     build without a reclaim thread too, for the figures before it).
  7. members in namespaces of their own (containers, pods): the join and a whole short process (spawn
     to exit) beside 7 members, and the fast path, each as a plain process and in pid, mount and UTS
     namespaces of its own (unshare --pid --fork --mount-proc --uts, as root). With --namespaces-only,
     this section alone.

usage: bench/share.py BUILD_DIR [--output REPORT.md] [--png-dir DIR] [--quick] [--reclaim-only]
                                [--namespaces-only]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(ROOT, "bench"))
from bench_common import by_name, clean_environment, run_benchmark, time_ns  # noqa: E402

MiB = 1 << 20


class Machine:
    """A simulated 16 GiB device shared between processes, and a sharing directory."""

    def __init__(self, build: str, share: bool = True):
        self.build = build
        self.tmp = tempfile.mkdtemp(prefix="gpumem-share-bench-")
        self.share = share
        os.mkdir(os.path.join(self.tmp, "ledger"), 0o700)
        self.procs = []

    def env(self, extra=None) -> dict:
        env = clean_environment()
        env.update({"LD_LIBRARY_PATH": os.path.join(self.build, "cudasim"),
                    "LD_PRELOAD": os.path.join(self.build, "shim", "libgpumem.so"),
                    "CUDASIM_SHARED_DEVICES": os.path.join(self.tmp, "sim"),
                    "CUDASIM_DEVICE_MEMORY": "16GiB", "CUDASIM_CONTEXT_OVERHEAD": "300MiB",
                    "GPUMEM_STATS_FILE": os.path.join(self.tmp, "stats-%p.json")})
        if self.share:
            env.update({"GPUMEM_SHARE": "auto", "GPUMEM_SHARE_DIR": os.path.join(self.tmp, "ledger")})
        env.update(extra or {})
        return env

    def path(self, name):
        return os.path.join(self.tmp, name)

    def start(self, *steps, env=None, program=None, prefix=()):
        argv = [*prefix, program or os.path.join(self.build, "tests", "integration", "programs", "share_worker"),
                *steps]
        proc = subprocess.Popen(argv, env=self.env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(proc)
        return proc

    def wait_file(self, name, timeout=60):
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.path(name)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} never appeared")
            time.sleep(0.005)

    def finish(self, proc, stats=None):
        out, err = proc.communicate(timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"{proc.args}: exit {proc.returncode}\n{err[-2000:]}")
        values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        with open(stats or self.path(f"stats-{proc.pid}.json")) as f:
            device = json.load(f)["devices"][0]
        return values, device

    def close(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        shutil.rmtree(self.tmp, ignore_errors=True)


def join_cost(build, others_list, runs):
    rows = []
    for others in others_list:
        machine = Machine(build)
        try:
            for i in range(others):
                machine.start("info", f"touch:{machine.path(f'r{i}')}", f"wait:{machine.path('done')}")
            for i in range(others):
                machine.wait_file(f"r{i}")
            times = [machine.finish(machine.start("info"))[1]["share"]["join_us"] for _ in range(runs)]
            open(machine.path("done"), "w").close()
            rows.append((others, statistics.median(times), sorted(times)[int(0.9 * (len(times) - 1))], max(times)))
        finally:
            machine.close()
    return rows


def fast_path(build, pairs):
    program = os.path.join(build, "bench", "shim_cost")
    rows = {}
    for label, share in (("defaults (bfc), not shared", False), ("defaults (bfc), GPUMEM_SHARE=auto", True)):
        machine = Machine(build, share=share)
        try:
            runs = by_name(run_benchmark([program, f"--pairs={pairs}", "--warmup=10000", "--benchmark_repetitions=3",
                                          "--benchmark_filter=alloc_free_4KiB"], env=machine.env()))
            rows[label] = statistics.median(time_ns(run, "real_time") for run in runs["alloc_free_4KiB"])
        finally:
            machine.close()
    updates = {}
    machine = Machine(build)
    try:
        for n in (10000, 100000):
            updates[n] = machine.finish(machine.start("alloc:1x4", f"pairs:{n}"))[1]["share"]["ledger_updates"]
    finally:
        machine.close()
    return rows, updates


def growth_step(build, steps):
    rows = {}
    for label, share in (("growing vmm arena, not shared", False), ("growing vmm arena, GPUMEM_SHARE=auto", True)):
        samples = []
        for _ in range(3):
            machine = Machine(build, share=share)
            try:
                values, device = machine.finish(machine.start(
                    f"alloc:8x{steps}", env={"GPUMEM_PREALLOCATE": "false", "GPUMEM_REGION_SOURCE": "vmm"}))
                samples.append(float(values["alloc_ns"]))
                updates = device["share"]["ledger_updates"] if device.get("share") else 0
            finally:
                machine.close()
        rows[label] = (statistics.median(samples), updates)
    ledger = by_name(run_benchmark([os.path.join(build, "bench", "share_bench"), "--benchmark_repetitions=3",
                                    "--benchmark_filter=reserve_give_back|reclaim_poll"]))
    micro = {name: (statistics.median(time_ns(r, "real_time") for r in runs),
                    statistics.median(time_ns(r, "cpu_time") for r in runs)) for name, runs in ledger.items()}
    return rows, micro


def fairness(build, plot_png_dir):
    """Runs (c) and (d) with a trace per process; returns gpumem-plot's text for each."""
    plot = os.path.join(ROOT, "scripts", "gpumem-plot")
    outputs = {}
    for scenario in ("greedy", "borrow"):
        machine = Machine(build)
        try:
            trace = {"GPUMEM_TRACE": machine.path("trace-%p.csv")}
            growth = dict(trace, GPUMEM_PREALLOCATE="false")
            if scenario == "greedy":  # (c): three JAX-shaped processes, then a greedy one; they grow later
                victims = []
                for i in range(3):
                    victims.append(machine.start("alloc:512x2", f"touch:{machine.path(f'r{i}')}",
                                                 f"churn:@{machine.path('grow')}", "alloc:512x3",
                                                 f"touch:{machine.path(f'g{i}')}", f"churn:@{machine.path('done')}",
                                                 env=trace))
                    machine.wait_file(f"r{i}")
                greedy = machine.start(f"greedy:256:@{machine.path('stop')}", env=growth)
                time.sleep(1.0)
                open(machine.path("grow"), "w").close()
                for i in range(3):
                    machine.wait_file(f"g{i}")
                time.sleep(0.5)
                open(machine.path("stop"), "w").close()
                machine.finish(greedy)
                open(machine.path("done"), "w").close()
                for proc in victims:
                    machine.finish(proc)
            else:  # (d): a lender holding little, a borrower taking most, then the lender's guarantee back
                lender = machine.start("alloc:64x1", f"touch:{machine.path('r0')}", f"churn:@{machine.path('lend')}",
                                       "timed:6144", f"churn:@{machine.path('done')}", env=growth)
                machine.wait_file("r0")
                borrower = machine.start("alloc:1024x12", "sleep:500", "free:10", f"touch:{machine.path('r1')}",
                                         f"churn:@{machine.path('done')}", env=growth)
                machine.wait_file("r1")
                time.sleep(0.5)
                open(machine.path("lend"), "w").close()
                time.sleep(1.0)
                open(machine.path("done"), "w").close()
                machine.finish(borrower)
                machine.finish(lender)
            traces = sorted(os.path.join(machine.tmp, name) for name in os.listdir(machine.tmp)
                            if name.startswith("trace-"))
            argv = [sys.executable, plot, *traces, "--text"]
            if plot_png_dir:
                argv += ["-o", os.path.join(plot_png_dir, f"share-{scenario}.png"), "--title",
                         f"GPUMEM_SHARE=auto: {scenario}"]
            result = subprocess.run(argv, capture_output=True, text=True, check=False)
            outputs[scenario] = result.stdout + result.stderr
        finally:
            machine.close()
    return outputs


def idle_reclaim(build, runs):
    """Median and most of B's took_ms (one cuMemAlloc) in each idle case, and B's refusals."""
    # A preallocates (12 GiB of the 16 GiB device, alone) and uses 2 GiB; or borrows 12 GiB and frees it.
    # Both then only wait for a file. B (growing on demand) asks for 6 GiB: inside its guarantee, and
    # only A's idle memory holds it.
    cases = {
        "idle preallocated lender (A: 2 GiB used of its preallocation)": (("alloc:2048x1",), {}),
        "idle borrower after its frees (A: 12 GiB borrowed, all freed)":
            (("alloc:1536x8", "free:8"), {"GPUMEM_PREALLOCATE": "false"}),
        "B alone on the device": (None, {}),
    }
    rows = []
    for label, (steps, env) in cases.items():
        times = []
        refused = 0
        for _ in range(runs):
            machine = Machine(build)
            try:
                holder = None
                if steps is not None:
                    holder = machine.start(*steps, f"touch:{machine.path('ready')}", f"wait:{machine.path('done')}",
                                           env=env)
                    machine.wait_file("ready")
                    time.sleep(0.3)  # A's figures are published (and its allocation calls are over)
                values, _ = machine.finish(machine.start("timed:6144", env={"GPUMEM_PREALLOCATE": "false"}))
                times.append(float(values["took_ms"]))
                refused += values["timed"] != "CUDA_SUCCESS"
                open(machine.path("done"), "w").close()
                if holder is not None:
                    machine.finish(holder)
            finally:
                machine.close()
        rows.append((label, statistics.median(times), max(times), refused, runs))
    return rows


def alone(build, runs):
    """examples/alloc_churn alone on the device, not shared and shared: per setup, the driver
    allocations of its runs (all the same) and the median of its time in allocation calls (ms)."""
    program = os.path.join(build, "examples", "alloc_churn")
    rows = []
    for latency in ("none", "published"):
        for label, share in (("not shared", False), ("GPUMEM_SHARE=auto", True)):
            allocations, call_ms = set(), []
            for _ in range(runs):
                machine = Machine(build, share=share)
                try:
                    proc = subprocess.Popen([program], env=machine.env({"CUDASIM_LATENCY": latency}),
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                    machine.procs.append(proc)
                    device = machine.finish(proc)[1]
                    allocations.add(device["driver_allocations"])
                    call_ms.append(device["call_ns"] / 1e6)
                finally:
                    machine.close()
            rows.append((latency, label, "/".join(str(a) for a in sorted(allocations)), statistics.median(call_ms)))
    return rows


# A container's namespaces: its own pid namespace and /proc, mount table and host name.
NAMESPACES = ("unshare", "--pid", "--fork", "--mount-proc", "--uts")


def namespaced(build, runs, pairs):
    """Join time, a whole short process and the fast path, plain and in namespaces of its own:
    {label: (join median us, join p90 us, process median ms, fast path ns per pair)}."""
    rows = {}
    for label, prefix in (("plain process", ()), ("own pid, mount and UTS namespaces", NAMESPACES)):
        machine = Machine(build)
        try:
            for i in range(7):  # the others, each in namespaces of its own too when the newcomer is
                machine.start("info", f"touch:{machine.path(f'r{i}')}", f"wait:{machine.path('done')}",
                              prefix=prefix, env={"GPUMEM_STATS_FILE": machine.path(f"other-{i}.json")})
            for i in range(7):
                machine.wait_file(f"r{i}")
            joins, wall = [], []
            for n in range(runs):
                stats = machine.path(f"run-{n}.json")
                started = time.monotonic()
                proc = machine.start("info", prefix=prefix, env={"GPUMEM_STATS_FILE": stats})
                device = machine.finish(proc, stats=stats)[1]
                wall.append((time.monotonic() - started) * 1000)
                joins.append(device["share"]["join_us"])
            open(machine.path("done"), "w").close()
            bench = by_name(run_benchmark([*prefix, os.path.join(build, "bench", "shim_cost"), f"--pairs={pairs}",
                                           "--warmup=10000", "--benchmark_repetitions=3",
                                           "--benchmark_filter=alloc_free_4KiB"], env=machine.env()))
            fast = statistics.median(time_ns(run, "real_time") for run in bench["alloc_free_4KiB"])
            identity = by_name(run_benchmark([*prefix, os.path.join(build, "bench", "share_bench"),
                                              "--benchmark_repetitions=3", "--benchmark_filter=own_identity"]))
            read = statistics.median(time_ns(run, "real_time") for run in identity["own_identity"])
            rows[label] = (statistics.median(joins), sorted(joins)[int(0.9 * (len(joins) - 1))],
                           statistics.median(wall), fast, read / 1000)
        finally:
            machine.close()
    return rows


def namespaced_section(build, runs, pairs):
    lines = ["## Members in namespaces of their own (containers, pods)", "",
             "A process beside 7 members, as a plain process and in its own pid, mount and UTS namespaces "
             "(`unshare --pid --fork --mount-proc --uts`; the 7 alike): its join (join_us, which includes "
             "reading its identity from /proc), the whole process `share_worker info` from spawn to exit "
             "(unshare included), the fast path (bench/shim_cost, run the same way) and reading the "
             "identity alone (bench/share_bench own_identity).", "",
             "| member | join median | join p90 | whole process median | fast path ns per pair | identity read |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {label} | {join:.0f} us | {p90:.0f} us | {wall:.0f} ms | {fast:.0f} | {read:.0f} us |"
              for label, (join, p90, wall, fast, read) in namespaced(build, runs, pairs).items()]
    return lines + [""]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build")
    parser.add_argument("--output", help="write the Markdown report here (default: stdout)")
    parser.add_argument("--png-dir", help="also draw the fairness figures as PNGs here (needs matplotlib)")
    parser.add_argument("--quick", action="store_true", help="fewer runs: checks that everything runs")
    parser.add_argument("--reclaim-only", action="store_true", help="only the reclaim from idle members (6.)")
    parser.add_argument("--namespaces-only", action="store_true", help="only the members in namespaces (7.)")
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    runs, pairs, steps = (3, 20000, 20) if args.quick else (15, 200000, 200)
    lines = ["# Sharing one GPU: measured figures", "",
             f"`bench/share.py {args.build}{' --quick' if args.quick else ''}"
             f"{' --reclaim-only' if args.reclaim_only else ''}{' --namespaces-only' if args.namespaces_only else ''}` "
             f"on {os.uname().nodename} "
             f"({os.cpu_count()} cores), {time.strftime('%Y-%m-%d')}; simulated 16 GiB device, 300 MiB per context.", ""]
    if args.namespaces_only:
        write_report(lines + namespaced_section(build, runs, pairs), args.output)
        return
    lines += ["## Reclaim from idle members (B's cuMemAlloc of 6 GiB, took_ms; GPUMEM_SHARE_WAIT 5 s)", "",
              "| A | median | most | refused |", "|---|---|---|---|"]
    lines += [f"| {label} | {median:.0f} ms | {most:.0f} ms | {refused} of {n} |"
              for label, median, most, refused, n in idle_reclaim(build, 3 if args.quick else 7)]
    lines.append("")
    if args.reclaim_only:
        write_report(lines, args.output)
        return
    lines += ["## Joining the ledger (join_us of the exit statistics)", "",
              "| other members | median | p90 | max |", "|---|---|---|---|"]
    for others, median, p90, most in join_cost(build, (0, 1, 7, 31), runs):
        lines.append(f"| {others} | {median:.0f} us | {p90:.0f} us | {most:.0f} us |")
    rows, updates = fast_path(build, pairs)
    lines += ["", "## The fast path (4 KiB cuMemAlloc + cuMemFree from memory the arena holds, bench/shim_cost)", "",
              "| setup | ns per pair |", "|---|---|"]
    lines += [f"| {label} | {ns:.0f} |" for label, ns in rows.items()]
    lines += ["", "Ledger updates of a whole process (join, preallocation granules): "
              + ", ".join(f"{n} pairs: {u}" for n, u in updates.items()) + ".", ""]
    growth, micro = growth_step(build, steps)
    lines += ["## One growth step (an 8 MiB allocation of a growing vmm arena: 4 granules mapped)", "",
              "| setup | ns per growth step | ledger updates |", "|---|---|---|"]
    lines += [f"| {label} | {ns:.0f} | {u} |" for label, (ns, u) in growth.items()]
    lines += ["", "The ledger alone (bench/share_bench: one reserve and its give-back of a 2 MiB granule):", "",
              "| benchmark | real ns | CPU ns |", "|---|---|---|"]
    lines += [f"| {name} | {real:.1f} | {cpu:.1f} |" for name, (real, cpu) in sorted(micro.items())]
    lines += ["", "## Alone on the device (examples/alloc_churn, exit statistics)", "",
              "| CUDASIM_LATENCY | setup | driver allocations | time in allocation calls (median) |",
              "|---|---|---|---|"]
    lines += [f"| {latency} | {label} | {allocations} | {ms:.1f} ms |"
              for latency, label, allocations, ms in alone(build, runs)]
    for scenario, text in fairness(build, args.png_dir).items():
        lines += ["", f"## Fairness: {scenario} (gpumem-plot over the processes' traces)", "", "```", text.rstrip(), "```"]
    lines += [""] + namespaced_section(build, runs, pairs)
    write_report(lines, args.output)


def write_report(lines, output):
    report = "\n".join(lines) + "\n"
    if output:
        with open(output, "w") as f:
            f.write(report)
    else:
        sys.stdout.write(report)


if __name__ == "__main__":
    main()
