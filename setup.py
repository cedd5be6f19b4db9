"""setuptools hook: install kcache-hook.pth into site-packages next to the packages.

The .pth line imports kcache._hook only when KCACHE_ENABLE is set (see kcache/_hook.py), so
it costs one environment lookup per interpreter start otherwise. An editable install also
gets kcache-clone-guard.pth and _kcache_clone_guard.py (read it: ``import kcache`` from the
folder holding a clone named kcache). All metadata lives in pyproject.toml.
"""
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "kcache-hook.pth"
#: Editable installs only: ``import kcache`` from the folder holding a clone named kcache
#: finds the installed package, not the clone's folder as an empty namespace package.
GUARD, GUARD_PTH = "_kcache_clone_guard.py", "kcache-clone-guard.pth"


class build_py_with_pth(build_py):
    """build_py that also puts the .pth file at the root of the wheel (= site-packages).

    For ``pip install .`` it goes into build_lib; for ``pip install -e .`` straight into the
    unpacked editable wheel (setuptools' editable_wheel points install_lib there and does not
    pack build_lib).
    """

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            target = Path(self.distribution.get_command_obj("install").install_lib)
        else:
            target = Path(self.build_lib)
        target.mkdir(parents=True, exist_ok=True)
        self.copy_file(PTH, str(target / PTH), preserve_mode=False)
        if getattr(self, "editable_mode", False):
            self.copy_file(GUARD, str(target / GUARD), preserve_mode=False)
            (target / GUARD_PTH).write_text("import _kcache_clone_guard\n")

    def get_outputs(self, include_bytecode=True):
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH)]


setup(cmdclass={"build_py": build_py_with_pth})
