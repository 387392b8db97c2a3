"""examples/kubernetes/*.yaml: each manifest parses (PyYAML, Debian's python3-yaml) as the objects it
means to be, ships gpumem the way docs/kubernetes.md says (an init container copies libgpumem.so and
libgpumem-core.so into an emptyDir volume that the GPU containers mount and preload from), and sets
only variables gpumem reads. Then each pod is played over the simulator without a cluster: the init container's copy is
made into a folder standing for the volume, and the container's program runs with the manifest's
environment (plus what the device plugin would add: HAMi's CUDA_DEVICE_MEMORY_LIMIT_0, torchrun's
worker variables), so the limit the shim takes is checked against what the manifest asks for.

Exits with status 77 (Meson's SKIP), saying why, when PyYAML cannot be imported.
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

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
    return document["spec"]["template"]["spec"] if document["kind"] == "Job" else document["spec"]


def environment_of(container):
    return {variable["name"]: str(variable["value"]) for variable in container.get("env", [])}


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
                         ["gpumem-hami-pod.yaml", "gpumem-pod.yaml", "gpumem-torchrun-job.yaml"])

    def test_each_manifest_ships_the_library_through_a_shared_volume(self):
        known = documented_variables()
        for manifest in MANIFESTS:
            with self.subTest(manifest=os.path.basename(manifest)):
                with open(manifest, encoding="utf-8") as f:
                    documents = [d for d in yaml.safe_load_all(f) if d is not None]
                self.assertEqual(len(documents), 1)
                (document,) = documents
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
                    self.assertEqual(container["resources"]["limits"]["nvidia.com/gpu"], 1)
                    unknown = [name for name in env if name.startswith("GPUMEM_") and name not in known]
                    self.assertEqual(unknown, [], "variables gpumem does not read")

    def play(self, manifest, extra=None, ranks=1):
        """Runs the manifest's first container as rank_job ranks over the simulator (16 GiB device),
        the library copied where the init container copies it: the ranks' statistics."""
        with open(manifest, encoding="utf-8") as f:
            spec = pod_spec(yaml.safe_load(f))
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


if __name__ == "__main__":
    print(f"PyYAML {yaml.__version__}; manifests: {', '.join(os.path.basename(m) for m in MANIFESTS)}")
    unittest.main(verbosity=2)
