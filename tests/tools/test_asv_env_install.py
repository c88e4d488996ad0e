"""tools/asv_env_install.py: asv's environment sees the host's packages, .pth files included, and the project."""

import os
import pathlib
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import asvrun  # noqa: E402


def test_the_environment_runs_the_host_site_pth_files_and_installs_the_project(tmp_path):
    # A host site-packages holding a module and a .pth that puts another folder on the path, as
    # quack's nvidia-cutlass-dsl does (its packages are found only through its .pth).
    host, extra = tmp_path / "host-site", tmp_path / "dsl_packages"
    host.mkdir()
    extra.mkdir()
    (host / "host_module.py").write_text("")
    (extra / "dsl_module.py").write_text("")
    (host / "dsl.pth").write_text(f"import sys; sys.path.insert(0, {str(extra)!r})\n")
    # The project as a wheel (what pip gets from asv's build step; no build backend needed here).
    toy = tmp_path / "toy_project-1-py3-none-any.whl"
    info = "toy_project-1.dist-info"
    with zipfile.ZipFile(toy, "w") as z:
        z.writestr("toy_project/__init__.py", "")
        z.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: toy-project\nVersion: 1\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", f"toy_project/__init__.py,,\n{info}/METADATA,,\n{info}/WHEEL,,\n{info}/RECORD,,\n")
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    python = env / "bin" / "python"
    # An empty entry is dropped: it would put each later interpreter's own folder on the path.
    run_env = {**os.environ, "FUSEDKERNEL_HOST_SITE": os.pathsep + str(host), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    install = subprocess.run([str(python), str(ROOT / "tools" / "asv_env_install.py"), str(toy)], env=run_env,
                             capture_output=True, text=True)
    assert install.returncode == 0, install.stderr
    (tmp_path / "planted.pth").write_text("import sys; sys.exit('a .pth file of the current folder ran')\n")
    # Run from a folder holding a .pth file: it must not run. The host's folder comes after the environment's own.
    code = ("import site, sys, host_module, dsl_module, toy_project; "
            f"print(sys.path.index(site.getsitepackages()[0]) < sys.path.index({str(host)!r}))")
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr


def test_the_runner_hands_over_only_the_host_folders_that_exist(tmp_path, monkeypatch):
    # The H200's python3 lists three site folders that do not exist; handed over, every class failed
    # at install (23c8c2a, 2026-12-01).
    import site

    real, missing = tmp_path / "site-packages", tmp_path / "local" / "dist-packages"
    real.mkdir()
    monkeypatch.setattr(site, "getsitepackages", lambda: [str(real), str(missing)])
    assert asvrun.asv_env("gpu", None)["FUSEDKERNEL_HOST_SITE"] == str(real)
    # None exists: said at once, not as "not set" at each class's install.
    monkeypatch.setattr(site, "getsitepackages", lambda: [str(missing)])
    with pytest.raises(SystemExit, match="none of this interpreter's site-packages folders exists"):
        asvrun.asv_env("gpu", None)


def test_a_missing_host_folder_is_refused_at_install(tmp_path):
    env = {**os.environ, "FUSEDKERNEL_HOST_SITE": str(tmp_path / "nowhere")}
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "asv_env_install.py"), str(tmp_path)],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 1 and "no such folder" in out.stderr and "nowhere" in out.stderr


def test_without_the_host_site_it_says_how_to_run_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "FUSEDKERNEL_HOST_SITE"}
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "asv_env_install.py"), str(tmp_path)],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 1 and "run asv through tools/bench.py" in out.stderr
