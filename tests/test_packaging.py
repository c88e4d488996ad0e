"""The installed package carries every file it reads at run time."""

import pathlib
import shutil
import subprocess
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_wheel_carries_the_native_lanes_source(tmp_path):
    # native.enable() builds kernels/native.cpp from the installed package (asv installs a wheel).
    # Built from a copy: setuptools' build/ folder in the checkout could hold an older build.
    src = tmp_path / "src"
    shutil.copytree(ROOT / "fusedkernel", src / "fusedkernel", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "-w", str(tmp_path), str(src)], check=True)
    (wheel,) = tmp_path.glob("fusedkernel-*.whl")
    assert "fusedkernel/kernels/native.cpp" in zipfile.ZipFile(wheel).namelist()
