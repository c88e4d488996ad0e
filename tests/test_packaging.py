"""The installed package carries every module of the checkout (asv installs each commit as a wheel)."""

import pathlib
import shutil
import subprocess
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_wheel_carries_every_module(tmp_path):
    # Built from a copy: setuptools' build/ folder in the checkout could hold an older build.
    src = tmp_path / "src"
    shutil.copytree(ROOT / "fusedkernel", src / "fusedkernel", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "-w", str(tmp_path), str(src)], check=True)
    (wheel,) = tmp_path.glob("fusedkernel-*.whl")
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "fusedkernel").rglob("*.py")}
    assert modules and modules <= set(zipfile.ZipFile(wheel).namelist())
