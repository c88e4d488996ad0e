"""How a tracker run stops: the signals it catches and when they are raised.

A signal is recorded from the first instant (:func:`catch_signals`) and
raised as :class:`asvrun.Interrupted` only once armed (:func:`arm`, after
torch's import), and only once: a second Ctrl-C must not break the
unwinding that writes the provenance. :func:`unarmed` defers a signal past a
block (an import; the provenance record of a finished commit).
"""

from __future__ import annotations

import contextlib
import pathlib
import signal
import threading

import asvrun

# The signals that stop a run (like Ctrl-C: temporary folders go, the provenance of the commit in
# progress is written, asvrun.asv stops asv) and the exit status of each.
STOPS = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}
_signals = {"installed": [], "received": [], "armed": False, "raised": False}


def _on_signal(signum, _frame):
    """Record the signal; raise it only when armed, and only once (a second Ctrl-C must not break the unwinding)."""
    _signals["received"].append(signum)
    if _signals["armed"] and not _signals["raised"]:
        _signals["raised"] = True
        raise asvrun.Interrupted(signal.Signals(signum).name)


def catch_signals() -> dict:
    """Install :func:`_on_signal`, unarmed; return the handlers it replaced.

    Whatever the inherited setting: a script's background job starts with
    SIGINT ignored, and a run stopped by SIGINT must stop in every phase (asv's
    included, where asvrun.asv catches it). Only a SIGHUP ignored by nohup stays
    ignored. Only the main thread may set handlers.
    """
    _signals.update(installed=[], received=[], armed=False, raised=False)
    if threading.current_thread() is not threading.main_thread():
        return {}
    old = {s: signal.getsignal(s) for s in STOPS if s != signal.SIGHUP or signal.getsignal(s) != signal.SIG_IGN}
    for s in old:
        signal.signal(s, _on_signal)
    _signals["installed"] = list(old)
    return old


def arm() -> None:
    """From now on a signal raises :class:`asvrun.Interrupted` at once; one received before raises now.

    Until then (torch's import: seconds) a signal is only recorded: raised
    inside an import, an exception can be swallowed by the imported code's own
    ``except``. Our handlers are put back where an import replaced them.
    """
    for s in _signals["installed"]:
        if signal.getsignal(s) is not _on_signal:
            signal.signal(s, _on_signal)
    _signals["armed"] = True
    if _signals["received"] and not _signals["raised"]:
        _signals["raised"] = True
        raise asvrun.Interrupted(signal.Signals(_signals["received"][0]).name)


def asv(args: list[str], env: dict, log: pathlib.Path) -> int:
    """asvrun.asv; its :class:`asvrun.Interrupted` is this run's signal, raised (a second one must not break
    the unwinding: the provenance and the results it writes)."""
    try:
        return asvrun.asv(args, env, log)
    except asvrun.Interrupted as e:
        _signals["received"].append(signal.Signals[e.args[0]])
        _signals["raised"] = True
        raise


@contextlib.contextmanager
def unarmed():
    """Signals in the block are recorded, and raised after it (around an import)."""
    was, _signals["armed"] = _signals["armed"], False
    try:
        yield
    finally:
        _signals["armed"] = was
    if was:
        arm()



def disarm() -> None:
    """A signal from now on is only recorded (the run has unwound: its report must not be broken)."""
    _signals["armed"] = False


def first_received() -> signal.Signals | None:
    """The first signal this run received, if any."""
    return signal.Signals(_signals["received"][0]) if _signals["received"] else None


if __name__ == "__main__":
    raise SystemExit("tools/signals.py is a module of the tracker's command line: python tools/bench.py --help")
