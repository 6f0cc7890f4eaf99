"""docs/first_loss.md, run as written up to its training: the scaffold, the page's maths and tests put in
place as the page says, the plugin's own tests, the loss contract, and the page's grid file planned."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from test_losscheck import clean_env

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "first_loss.md"


def blocks(text: str) -> dict[str, str]:
    """The page's titled code blocks: ``{title: code}``."""
    return dict(re.findall(r'```\w+ title="(.*?)"\n(.*?)```', text, re.S))


def _between(text: str, start: str, end: str, new: str) -> str:
    a = text.index(start)
    return text[:a] + new + text[text.index(end, a) :]


def test_the_tutorial_scaffolds_checks_tests_and_plans_its_loss(tmp_path):
    code = blocks(PAGE.read_text())
    env = {**clean_env(), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(tmp_path / "plugins" / "oxbench-my-hinge")}  # fmt: skip

    def sh(*cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)

    assert sh("oxbench", "losses", "new", "my_hinge", "--dir", "plugins").returncode == 0
    pkg = tmp_path / "plugins" / "oxbench-my-hinge"
    init = pkg / "oxbench_my_hinge" / "__init__.py"
    text = init.read_text().replace(
        "from __future__ import annotations\n", "from __future__ import annotations\n\nimport torch\n", 1
    )
    init.write_text(
        _between(text, "def my_hinge_loss", "\n\n\nspec = ", code["oxbench_my_hinge/__init__.py"].rstrip())
    )
    tests = pkg / "tests" / "test_my_hinge.py"
    tests.write_text(_between(tests.read_text(), "def test_hand_computed_value", "def test_the_contract",
                              code["tests/test_my_hinge.py"].rstrip() + "\n\n\n"))  # fmt: skip
    r = sh(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(pkg / "tests"))
    assert r.returncode == 0 and "3 passed" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    r = sh("oxbench", "losses", "check", "oxbench_my_hinge:spec", "--fast")
    assert r.returncode == 0 and "my_hinge: every rule holds" in r.stdout, r.stdout + r.stderr
    (tmp_path / "first_loss.yaml").write_text(code["first_loss.yaml"])
    r = sh("oxbench", "run", "--grid", "first_loss.yaml", "--plugin", "oxbench_my_hinge", "--plan")
    assert r.returncode == 0 and "plan: 6 cells" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
