"""examples/kubernetes/*.yaml: each manifest parses (PyYAML, Debian's python3-yaml) as the objects it
means to be, ships gpumem the way docs/kubernetes.md says (an init container copies libgpumem.so and
libgpumem-core.so into an emptyDir volume that the GPU containers mount and preload from), and sets
only variables gpumem reads. Then each pod is played over the simulator without a cluster: the init container's copy is
made into a folder standing for the volume, and the container's program runs with the manifest's
environment (plus what the device plugin would add: HAMi's CUDA_DEVICE_MEMORY_LIMIT_0, torchrun's
worker variables), so the limit the shim takes is checked against what the manifest asks for.

The pods that share one GPU through the node's ledger (gpumem-shared-gpu-pods*.yaml) are played as a
node: gpumem-top-daemonset.yaml's init container makes the ledger directory (a folder standing for the
hostPath), each pod's container runs in pid and UTS namespaces of its own (host name: the pod's name)
as the pod's user and groups, with the downward API's POD_NAME and POD_NAMESPACE, and the DaemonSet's
gpumem-top, serving --prometheus, is scraped while both run: each pod is a member, named by its pod.

Exits with status 77 (Meson's SKIP), saying why, when PyYAML cannot be imported.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

try:
    import yaml
except ImportError as error:
    print(f"SKIP: PyYAML cannot be imported by {sys.executable} ({error}); scripts/bootstrap installs "
          f"Debian's python3-yaml")
    sys.exit(77)

from gpumem_testlib import TestCase, job_environment, launch_by_hand, program_path, shim_path, source_root, stats_files

GiB = 1 << 30
MiB = 1 << 20
LIBRARIES = ["libgpumem-core.so", "libgpumem.so"]
MANIFESTS = sorted(glob.glob(os.path.join(source_root(), "examples", "kubernetes", "*.yaml")))


def pod_spec(document):
    return document["spec"]["template"]["spec"] if document["kind"] in ("Job", "DaemonSet") else document["spec"]


def environment_of(container, metadata=None):
    """The container's variables; those from the downward API (valueFrom.fieldRef) as the kubelet sets
    them from the pod's `metadata` (its namespace "default" when the manifest names none)."""
    env = {}
    for variable in container.get("env", []):
        if "value" in variable:
            env[variable["name"]] = str(variable["value"])
        else:
            field = variable["valueFrom"]["fieldRef"]["fieldPath"]
            assert field.startswith("metadata."), field
            env[variable["name"]] = dict(namespace="default", **(metadata or {})).get(field.split(".", 1)[1], "")
    return env


def documents_of(manifest):
    with open(manifest, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def documented_variables():
    """The variables docs/configuration.md's table documents (test_readme.py checks it against the policy)."""
    with open(os.path.join(source_root(), "docs", "configuration.md"), encoding="utf-8") as f:
        return set(re.findall(r"^\| `([A-Z_]+)` \|", f.read(), re.MULTILINE))


class KubernetesManifestTest(TestCase):
    def setUp(self):
        self.folder = tempfile.mkdtemp(prefix="gpumem-kubernetes-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", self.folder], check=False))

    def test_there_are_manifests(self):
        self.assertEqual([os.path.basename(m) for m in MANIFESTS],
                         ["gpumem-hami-pod.yaml", "gpumem-pod.yaml", "gpumem-shared-gpu-pods-no-plugin.yaml",
                          "gpumem-shared-gpu-pods.yaml", "gpumem-top-daemonset.yaml", "gpumem-torchrun-job.yaml"])

    def test_each_manifest_ships_the_library_through_a_shared_volume(self):
        known = documented_variables()
        for manifest, document in ((m, d) for m in MANIFESTS for d in documents_of(m) if d["kind"] != "DaemonSet"):
            with self.subTest(manifest=os.path.basename(manifest), name=document["metadata"]["name"]):
                self.assertIn(document["kind"], ("Pod", "Job"))
                self.assertTrue(document["apiVersion"] in ("v1", "batch/v1") and document["metadata"]["name"])
                spec = pod_spec(document)
                volumes = {v["name"]: v for v in spec["volumes"]}
                (init,) = spec["initContainers"]
                command = init["command"]
                self.assertEqual(command[0], "cp")
                sources, target = command[1:-1], command[-1]
                # Both libraries, side by side: libgpumem.so loads the core from beside itself.
                self.assertEqual(sorted(os.path.basename(s) for s in sources), LIBRARIES, command)
                self.assertEqual(len({os.path.dirname(s) for s in sources}), 1, command)
                mounts = {m["mountPath"]: m["name"] for m in init["volumeMounts"]}
                volume = mounts[target.rstrip("/")]
                self.assertEqual(volumes[volume], {"name": volume, "emptyDir": {}})
                for container in spec["containers"]:
                    env = environment_of(container)
                    mounted = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
                    # The library preloaded from where the init container put it.
                    self.assertEqual(env["LD_PRELOAD"], os.path.join(mounted[volume], "libgpumem.so"))
                    if spec.get("runtimeClassName") == "nvidia":  # no device plugin: the runtime hands the GPU
                        self.assertRegex(env["NVIDIA_VISIBLE_DEVICES"], r"^GPU-[0-9a-f-]{36}$")
                        self.assertNotIn("resources", container)
                    else:
                        self.assertEqual(container["resources"]["limits"]["nvidia.com/gpu"], 1)
                    unknown = [name for name in env if name.startswith("GPUMEM_") and name not in known]
                    self.assertEqual(unknown, [], "variables gpumem does not read")

    def play(self, manifest, extra=None, ranks=1):
        """Runs the manifest's first container as rank_job ranks over the simulator (16 GiB device),
        the library copied where the init container copies it: the ranks' statistics."""
        spec = pod_spec(documents_of(manifest)[0])
        volume = os.path.join(self.folder, os.path.basename(manifest), "volume")
        os.makedirs(volume)
        init = spec["initContainers"][0]
        mount = init["volumeMounts"][0]["mountPath"]
        built = os.path.dirname(shim_path())
        for source in init["command"][1:-1]:  # the init container's copy, from the build's libraries
            shutil.copy(os.path.join(built, os.path.basename(source)),
                        os.path.join(volume, os.path.relpath(init["command"][-1], mount)))
        container = spec["containers"][0]
        env = {name: value.replace(container["volumeMounts"][0]["mountPath"], volume)
               for name, value in environment_of(container).items()}
        env.pop("GPUMEM_STATS_FILE", None)  # the test's own, one per rank
        job = os.path.join(self.folder, os.path.basename(manifest), "job")
        os.makedirs(os.path.join(job, "barrier"))
        environment = job_environment(job, {**env, **(extra or {})}, preload=False)
        variables = [{"LOCAL_RANK": str(r), "RANK": str(r), "LOCAL_WORLD_SIZE": str(ranks)} if ranks > 1 else {}
                     for r in range(ranks)]
        results = launch_by_hand([program_path("rank_job"), 512 * MiB, os.path.join(job, "barrier"), ranks],
                                 variables, environment)
        for result in results:
            self.assertEqual(result.result, "ok", result.stderr)
            self.assertIn("device 0: limit ", result.stderr)  # the shim was preloaded from the volume
        return stats_files(job)

    def manifest(self, name):
        return os.path.join(source_root(), "examples", "kubernetes", name)

    def test_the_pod_with_a_limit_of_its_own(self):
        (document,) = self.play(self.manifest("gpumem-pod.yaml")).values()
        self.assertEqual(document["devices"][0]["limit"], 4 * GiB)

    def test_the_pod_on_a_hami_slice(self):
        # HAMi's device plugin adds the slice's size for device 0, from nvidia.com/gpumem (MiB).
        with open(self.manifest("gpumem-hami-pod.yaml"), encoding="utf-8") as f:
            slice_mib = pod_spec(yaml.safe_load(f))["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"]
        stats = self.play(self.manifest("gpumem-hami-pod.yaml"), {"CUDA_DEVICE_MEMORY_LIMIT_0": f"{slice_mib}m"})
        (document,) = stats.values()
        self.assertEqual(document["devices"][0]["limit"], slice_mib * MiB)  # not 0.75 of the 16 GiB

    def test_the_torchrun_job(self):
        stats = self.play(self.manifest("gpumem-torchrun-job.yaml"), ranks=4)
        self.assertEqual(sorted(stats), [0, 1, 2, 3])
        for document in stats.values():
            self.assertEqual(document["devices"][0]["limit"], 3 * GiB)  # 0.75 x 16 GiB / 4 workers


class SharedGpuNodeTest(TestCase):
    """The pods of gpumem-shared-gpu-pods*.yaml on one node, with gpumem-top-daemonset.yaml."""

    def setUp(self):
        self.folder = tempfile.mkdtemp(prefix="gpumem-kubernetes-node-")
        os.chmod(self.folder, 0o755)
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", self.folder], check=False))
        self.procs = []
        self.addCleanup(self.stop_all)
        (self.daemonset,) = documents_of(os.path.join(source_root(), "examples", "kubernetes",
                                                      "gpumem-top-daemonset.yaml"))

    def stop_all(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()

    def test_the_daemonset(self):
        spec = pod_spec(self.daemonset)
        self.assertTrue(spec["hostPID"])  # the members' pids on the node
        (container,) = spec["containers"]
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        share = mounts["gpumem-share"]
        self.assertTrue(share["readOnly"])
        self.assertEqual(volumes["gpumem-share"]["hostPath"]["path"], "/run/gpumem")
        command = container["command"]
        self.assertEqual(command[command.index("--dir") + 1], share["mountPath"])
        self.assertIn("--prometheus", command)
        port = command[command.index("--listen") + 1]
        self.assertEqual(container["ports"][0]["containerPort"], int(port))

    def make_ledger_directory(self) -> str:
        """The DaemonSet's first init container, its hostPath standing as a folder here."""
        spec = pod_spec(self.daemonset)
        init = spec["initContainers"][0]
        node_run = os.path.join(self.folder, "node-run")
        os.mkdir(node_run)
        mount = init["volumeMounts"][0]["mountPath"]
        self.assertEqual(init["command"][:2], ["sh", "-c"])
        subprocess.run(["sh", "-c", init["command"][2].replace(mount, node_run)], check=True)
        ledger_dir = os.path.join(node_run, "gpumem")
        info = os.stat(ledger_dir)
        self.assertEqual((info.st_mode & 0o7777, info.st_uid, info.st_gid), (0o2770, 0, 2000))
        return ledger_dir

    def start_pod(self, document, ledger_dir, devices, ready):
        spec = pod_spec(document)
        (container,) = spec["containers"]
        volume = os.path.join(self.folder, document["metadata"]["name"])
        os.makedirs(volume)
        for library in LIBRARIES:  # the init container's copy
            shutil.copy(os.path.join(os.path.dirname(shim_path()), library), volume)
        env = environment_of(container, document["metadata"])
        self.assertEqual(env["GPUMEM_SHARE"], "auto")
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        self.assertEqual(env["GPUMEM_SHARE_DIR"], mounts["gpumem-share"])
        self.assertEqual({v["name"]: v for v in spec["volumes"]}["gpumem-share"]["hostPath"]["path"],
                         pod_spec(self.daemonset)["volumes"][2]["hostPath"]["path"])
        env.pop("NVIDIA_VISIBLE_DEVICES", None)  # the container runtime's, not CUDA's
        def on_this_node(value):  # a path in a mount, as the folder standing for its volume here
            for mount, folder in ((mounts["gpumem-share"], ledger_dir), (mounts["gpumem"], volume)):
                if value == mount or value.startswith(mount + "/"):
                    return folder + value[len(mount):]
            return value
        env = {name: on_this_node(value) for name, value in env.items()}
        env.update(LD_LIBRARY_PATH=os.environ["GPUMEM_TEST_SIM_DIR"], CUDASIM_SHARED_DEVICES=devices,
                   CUDASIM_DEVICE_MEMORY="4GiB", GPUMEM_STATS_FILE=os.path.join(self.folder, "stats.%h.json"))
        security = spec.get("securityContext", {})
        user = ["setpriv", f"--reuid={security['runAsUser']}", f"--regid={security['runAsGroup']}",
                "--groups=" + ",".join(map(str, security["supplementalGroups"]))] if security else []
        name = document["metadata"]["name"]
        argv = ["unshare", "--kill-child", "--pid", "--fork", "--mount-proc", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', name, *user, program_path("share_worker"), "alloc:256x1",
                f"touch:{ready}", f"wait:{os.path.join(self.folder, 'done')}"]
        proc = subprocess.Popen(argv, env={**{k: v for k, v in os.environ.items() if not k.startswith("GPUMEM_")},
                                           **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(proc)
        deadline = time.monotonic() + 60
        while not os.path.exists(ready):
            self.assertIsNone(proc.poll(), proc.stderr.read() if proc.poll() is not None else "")
            self.assertLess(time.monotonic(), deadline, f"{name} never allocated")
            time.sleep(0.01)
        return proc, security.get("runAsUser", 0)

    def scrape(self, ledger_dir) -> str:
        (container,) = pod_spec(self.daemonset)["containers"]
        command = container["command"]
        mount = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        argv = [sys.executable, os.path.join(source_root(), "scripts", "gpumem-top")] + [
            "127.0.0.1:0" if arg == command[command.index("--listen") + 1] else arg.replace(mount["gpumem-share"], ledger_dir)
            for arg in command[2:]]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(proc)
        port = re.search(r"listening on [0-9.]+:(\d+)", proc.stderr.readline()).group(1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
            return answer.read().decode()

    def test_two_pods_share_the_node_ledger(self):
        for name in ("gpumem-shared-gpu-pods.yaml", "gpumem-shared-gpu-pods-no-plugin.yaml"):
            with self.subTest(manifest=name):
                self.stop_all()
                self.procs = []
                self.folder = tempfile.mkdtemp(prefix="gpumem-kubernetes-node-")  # a node of its own
                self.addCleanup(subprocess.run, ["rm", "-rf", self.folder], check=False)
                ledger_dir = self.make_ledger_directory()
                devices = os.path.join(self.folder, "devices")
                os.mkdir(devices, 0o777)
                os.chmod(devices, 0o777)
                device = os.path.join(devices, "cudasim-" + (b"cudasim" + bytes(9)).hex() + ".device")
                with open(device, "w"):
                    pass
                os.chmod(device, 0o666)
                os.chmod(self.folder, 0o777)  # the pods' users write their statistics and ready files
                pods = documents_of(os.path.join(source_root(), "examples", "kubernetes", name))
                self.assertEqual([d["kind"] for d in pods], ["Pod", "Pod"])
                started = [self.start_pod(d, ledger_dir, devices, os.path.join(self.folder, f"ready-{i}"))
                           for i, d in enumerate(pods)]
                metrics = self.scrape(ledger_dir)
                for document, (proc, uid) in zip(pods, started):
                    pod = document["metadata"]["name"]
                    samples = [line for line in metrics.splitlines()
                               if line.startswith("gpumem_member_alive{") and f'pod="{pod}"' in line]
                    self.assertEqual(len(samples), 1, metrics)
                    self.assertIn('pod_namespace="default"', samples[0])
                    self.assertIn(f'uid="{uid}"', samples[0])
                    self.assertIn('pid="1"', samples[0])
                    self.assertRegex(samples[0], r'host_pid="\d+"')
                    self.assertTrue(samples[0].endswith(" 1"), samples[0])
                with open(os.path.join(self.folder, "done"), "w"):
                    pass
                for document, (proc, _) in zip(pods, started):
                    out, err = proc.communicate(timeout=60)
                    self.assertEqual(proc.returncode, 0, err)
                    self.assertIn("result=ok", out, err)
                with open(os.path.join(self.folder, f"stats.{pods[1]['metadata']['name']}.json")) as f:
                    share = json.load(f)["devices"][0]["share"]
                self.assertEqual(share["members_at_join"], 2)


if __name__ == "__main__":
    print(f"PyYAML {yaml.__version__}; manifests: {', '.join(os.path.basename(m) for m in MANIFESTS)}")
    unittest.main(verbosity=2)
