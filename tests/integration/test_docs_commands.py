"""Every command README.md and docs/ mark as runnable runs as written, over the simulator.

A fenced block whose info string is `sh runnable` (or `bash runnable`) is run whole with bash -e, from
a folder that looks like the top of a clone after the README's two commands: every top-level entry of
the source tree, and `build-demo/` (what scripts/demo builds) standing for the build under test. Its
PATH starts with build-demo/scripts, as README.md tells the reader to set it after scripts/demo
(PATH_LINE, checked to be there), so the tools are named as installed. A block must exit 0 within its
time; what it prints is shown when it does not. Blocks that install, or that take minutes
(scripts/demo, scripts/test), are not marked runnable.
"""
import os
import re
import subprocess
import tempfile
import unittest

import gpumem_testlib as testlib

BLOCK = re.compile(r"^```(?:sh|bash) runnable[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
# The line README.md gives for the tools after scripts/demo; every block runs as after it.
PATH_LINE = "export PATH=$PWD/build-demo/scripts:$PATH"
TOOLS = ("gpumem-run", "gpumem-replay", "gpumem-plot", "gpumem-report", "gpumem-top")


def documents():
    root = testlib.source_root()
    paths = [os.path.join(root, "README.md")]
    docs = os.path.join(root, "docs")
    paths += sorted(os.path.join(docs, name) for name in os.listdir(docs) if name.endswith(".md"))
    return paths


def runnable_blocks(path):
    with open(path, encoding="utf-8") as document:
        text = document.read()
    for match in BLOCK.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        yield line, match.group(1)


def clone_view(directory):
    """Links every top-level entry of the source tree into `directory`, and build-demo to the build."""
    root = testlib.source_root()
    for name in os.listdir(root):
        if name.startswith("build") or name == ".git":
            continue
        os.symlink(os.path.join(root, name), os.path.join(directory, name))
    os.symlink(testlib.build_root(), os.path.join(directory, "build-demo"))


class DocumentedCommandsTest(testlib.TestCase):
    def test_readme_runs_its_three_ways_to_use_it(self):
        text = "".join(block for _, block in runnable_blocks(documents()[0]))
        for way in ("LD_PRELOAD=", "gpumem-run --sim", "gpumem-replay ", "gpumem-plot "):
            self.assertIn(way, text, "README.md's runnable blocks leave out one of its three ways to use it")

    def test_readme_tells_the_reader_to_put_the_tools_on_path(self):
        blocks = [block for _, block in runnable_blocks(documents()[0])]
        self.assertIn(PATH_LINE, blocks[0].splitlines(), "README.md's first runnable block must set PATH")
        # And that folder holds every tool under its installed name.
        for tool in TOOLS:
            self.assertTrue(os.access(os.path.join(testlib.build_root(), "scripts", tool), os.X_OK), tool)

    def test_the_tools_are_named_one_way(self):
        # Installed names only: no build-folder or source-tree path to a tool in the README.
        readme = open(documents()[0], encoding="utf-8").read()
        self.assertIsNone(re.search(r"(build[-\w]*|scripts|tools)/gpumem-(run|replay|plot|report|top)\b", readme),
                          "README.md names a tool by a path")

    def test_every_runnable_block_runs(self):
        ran = 0
        for path in documents():
            for line, block in runnable_blocks(path):
                with self.subTest(document=os.path.relpath(path, testlib.source_root()), line=line):
                    with tempfile.TemporaryDirectory(prefix="gpumem-docs-") as top:
                        clone_view(top)
                        environment = testlib.clean_environment()
                        environment["PATH"] = os.path.join(top, "build-demo", "scripts") + os.pathsep + \
                            environment.get("PATH", "")
                        result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block], cwd=top,
                                                env=environment, capture_output=True, text=True, timeout=300)
                    self.assertEqual(result.returncode, 0,
                                     f"{path}:{line}\n{block}\n--- stdout\n{result.stdout}--- stderr\n{result.stderr}")
                    ran += 1
        self.assertGreater(ran, 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
