"""The installed package is the one a script imports, whatever folder the script sits in."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_script_next_to_a_checkout_named_perfmodel_imports_the_package(tmp_path):
    """A checkout cloned as ``perfmodel/`` must not shadow the package for a script beside it.

    The clone folder has no ``__init__.py``, so Python sees it as a namespace package; with
    setuptools' default editable install (an import hook placed after the path search) the
    namespace wins and ``from perfmodel import __version__`` fails.  ``make setup`` installs
    through a path entry (``--config-settings editable_mode=compat``), where the real package
    wins.  If this fails in your own environment, reinstall that way (README, "Install").
    """
    (tmp_path / "perfmodel").symlink_to(ROOT, target_is_directory=True)
    script = tmp_path / "x.py"
    script.write_text("from perfmodel import __version__\nimport perfmodel\n"
                      "print(perfmodel.__file__)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                       text=True, check=False, env=env)
    assert r.returncode == 0, r.stderr.strip().splitlines()[-1]
    assert Path(r.stdout.strip()).resolve() == (ROOT / "perfmodel" / "__init__.py").resolve()
