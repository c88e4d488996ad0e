"""tools/asv_env_install.py: asv's environment sees the host's packages, .pth files included, and the project."""

import os
import pathlib
import subprocess
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[2]


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
    run_env = {**os.environ, "FUSEDKERNEL_HOST_SITE": str(host), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    subprocess.run([str(python), str(ROOT / "tools" / "asv_env_install.py"), str(toy)], check=True, env=run_env,
                   capture_output=True)
    out = subprocess.run([str(python), "-c", "import host_module, dsl_module, toy_project; print('ok')"],
                         capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr


def test_without_the_host_site_it_says_how_to_run_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "FUSEDKERNEL_HOST_SITE"}
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "asv_env_install.py"), str(tmp_path)],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 1 and "run asv through tools/bench.py" in out.stderr
