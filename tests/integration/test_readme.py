"""docs/configuration.md documents every environment variable the policy reads, in its variable table;
README.md gives the two commands."""
import os
import re
import unittest

SOURCE_ROOT = os.environ.get("GPUMEM_TEST_SOURCE_ROOT",
                             os.path.join(os.path.dirname(__file__), "..", ".."))


def read(relative):
    with open(os.path.join(SOURCE_ROOT, relative), encoding="utf-8") as f:
        return f.read()


class ReadmeVariablesTest(unittest.TestCase):
    def test_every_policy_variable_has_a_row(self):
        # The policy's own variables and the cluster limits it honours (the launchers' variables, read
        # in ranks.cpp too, are documented with the launchers instead).
        policy_sources = "".join(read(os.path.join("shim", "policy", name))
                                 for name in sorted(os.listdir(os.path.join(SOURCE_ROOT, "shim", "policy")))
                                 if name.endswith((".cpp", ".h")))
        read_by_policy = set(re.findall(r'"((?:GPUMEM|XLA|TF|CUDA_DEVICE_MEMORY|CUDA_MPS|CUPY)_[A-Z_]+)"',
                                        policy_sources))
        self.assertGreaterEqual(len(read_by_policy), 10, "the policy's variable names were not found")
        # A family of variables (GPUMEM_SAVED_<NAME>) is read by its prefix.
        rows = set(re.findall(r"^\| `([A-Z_]+)(?:<NAME>)?` \|", read("docs/configuration.md"), re.MULTILINE))
        self.assertEqual(sorted(read_by_policy - rows), [], "variables missing from docs/configuration.md's table")
        self.assertEqual(sorted(rows - read_by_policy), [], "docs/configuration.md documents variables the policy does not read")

    def test_the_two_commands(self):
        readme = read("README.md")
        for command in ("scripts/demo", "scripts/test"):
            self.assertRegex(readme, r"(?m)^" + re.escape(command) + r"\s")
            self.assertTrue(os.access(os.path.join(SOURCE_ROOT, command), os.X_OK), command)
        self.assertIn("scripts/test", read(".ci/run"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
