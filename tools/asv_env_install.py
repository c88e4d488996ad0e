"""asv install step: make the host's torch/triton visible, then install the commit.

Run by asv inside its virtualenv (asv.conf.json "install_command"). The GPU
runners' torch is a CUDA build preinstalled in another environment, with no
package registry to fetch it from, so the asv environment borrows it: a .pth
file adds the host interpreter's site-packages (FUSEDKERNEL_HOST_SITE, set by
tools/bench.py) after the environment's own, as site directories, so that the
host's own .pth files run too (quack's nvidia-cutlass-dsl puts its packages on
the path through one). The project itself is pure Python and is installed
with --no-deps.
Usage: python tools/asv_env_install.py BUILD_DIR
"""

import os
import subprocess
import sys
import sysconfig

host_site = os.environ.get("FUSEDKERNEL_HOST_SITE")
if not host_site:
    sys.exit("FUSEDKERNEL_HOST_SITE is not set: run asv through tools/bench.py")
# Absolute and existing folders only: an empty or relative entry would add
# whatever folder a later interpreter starts in (and run its .pth files).
dirs = [os.path.abspath(d) for d in host_site.split(os.pathsep) if d]
missing = [d for d in dirs if not os.path.isdir(d)]
if missing or not dirs:
    sys.exit(f"FUSEDKERNEL_HOST_SITE={host_site!r}: no such folder {', '.join(missing) or '(none given)'}")
pth = os.path.join(sysconfig.get_paths()["purelib"], "fusedkernel_host_site.pth")
with open(pth, "w") as f:
    f.writelines(f"import site; site.addsitedir({d!r})\n" for d in dirs)
subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                       "--no-build-isolation", "--no-index", sys.argv[1]])
