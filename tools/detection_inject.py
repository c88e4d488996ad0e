"""The detection experiment's slow commit: a chain of dependent multiplies injected into the kernels.

A chain follows the forward's row sums and the backward's dot products (whole rows and both exchange
forms of the split rows), so it lies on every program's critical path: GPU work, captured by CUDA graphs
and timed by events like the kernel itself. Its length is set per tile width (``BLOCK_N``), so one patch
slows each case by its own calibrated amount (``tools/detection_experiment.py``).
"""

from __future__ import annotations

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent

ANCHOR = "    sumsq = tl.sum(t * t, axis=1)\n"
BACKWARD_ANCHOR = "        dot = tl.sum(g * t_hat, axis=1)\n"
SPLIT_ANCHORS = ["            dot = _exchange(tl.sum(g * t_hat, axis=1), slot_ptr, epoch, block, part, BLOCK_M, SPLITS, "
                 "SPLITS_POW2)\n",
                 "            dot = _gather(words, slot_ptr, epoch, block, BLOCK_M, SPLITS, SPLITS_POW2)\n"]
# Per kernel file: the lines a chain follows and the step it repeats, on runtime values (eps, n_cols) that the
# compiler cannot fold. The backward carries chains because the forward's alone hardly slows the training call:
# in the whole-row kernel and in both exchange forms of the split kernel (the wide row's).
STEPS = {"forward.py": "sumsq = sumsq * (1.0 + eps * 1e-30)", "backward.py": "dot = dot * (1.0 + n_cols * 1e-30)"}
INJECTED = {"forward.py": [ANCHOR], "backward.py": [BACKWARD_ANCHOR, *SPLIT_ANCHORS]}


def chain_keys(case: str, max_splits: int, settings) -> list[int]:
    """The tile widths (``BLOCK_N``) that ``case``'s forward and backward launches compile (the chains' keys)."""
    from benchmarks._cases import DTYPES, parse
    from fusedkernel.kernels.backward_rule import backward_config
    from fusedkernel.kernels.forward_rule import forward_config

    dtype, tokens, hidden = parse(case)
    size = DTYPES[dtype].itemsize
    keys = {forward_config(hidden, size, max_splits, settings, tokens, stores).block_n
            for stores in (False, True)}
    return sorted(keys | {backward_config(hidden, size, max_splits, settings).block_n})


def device_keys(cases: dict) -> dict[str, list[int]]:
    """{regime: :func:`chain_keys`} with this host's launch settings (call in a child: it touches CUDA)."""
    from fusedkernel.kernels import launch

    index = -1 if launch.INTERPRET else 0
    return {r: chain_keys(c, launch._max_splits(index), launch._settings(index)) for r, c in cases.items()}


def patched_source(src: str, delays: dict[int, int], kernel: str = "forward.py", lenient: bool = False) -> str:
    """``kernel``'s source with a chain of ``delays[block_n]`` dependent multiplies after the row sums
    (forward.py) or the backward's dot products (backward.py: whole rows and both split forms) of tiles that
    wide. Each line must be there once; ``lenient``: a line that is not there is left out (an older base)."""
    step = STEPS[kernel]
    for anchor in INJECTED[kernel]:
        if src.count(anchor) != 1 and not (lenient and anchor not in src):
            raise ValueError(f"the line {anchor.strip()!r} was not found once in {kernel}")
        pad = anchor[:len(anchor) - len(anchor.lstrip())]
        chain = "".join(f"{pad}if BLOCK_N == {bn}:  # detection experiment: injected slowdown\n"
                        f"{pad}    for _ in tl.static_range({d}):\n"
                        f"{pad}        {step}\n" for bn, d in sorted(delays.items()) if d)
        src = src.replace(anchor, anchor + chain)
    return src


def install_variant(delays: dict[int, int], tmp: pathlib.Path) -> None:
    """Make this process's fused op launch the patched forward and backward (whole-row and split) kernels
    (fresh modules)."""
    from fusedkernel.kernels import launch

    tag = "_".join(f"{k}x{v}" for k, v in sorted(delays.items()))
    mods = {}
    # backward.py imports from .forward: its copy loads inside the package.
    names = {"forward.py": f"fk_forward_{tag}", "backward.py": f"fusedkernel.kernels.fk_backward_{tag}"}
    for kernel, name in names.items():
        path = tmp / f"{name.rpartition('.')[2]}.py"
        path.write_text(patched_source((ROOT / "fusedkernel" / "kernels" / kernel).read_text(), delays, kernel))
        spec = importlib.util.spec_from_file_location(name, path)
        mods[kernel] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mods[kernel])
    launch._rows_kernel = mods["forward.py"]._rows_kernel
    launch._bwd_rows_kernel = mods["backward.py"]._bwd_rows_kernel
    launch._bwd_split_kernel = mods["backward.py"]._bwd_split_kernel  # the wide row's backward
    launch._compiled.clear()  # its launchers were compiled from the other kernel



if __name__ == "__main__":
    raise SystemExit("tools/detection_inject.py is a module of the detection experiment: "
                     "python tools/detection_experiment.py --help")
