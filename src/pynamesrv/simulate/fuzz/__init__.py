"""``pynamesrv fuzz``: mutated requests against a name server, checked after every batch.

The seeds are every request the server answers, built by the project's request builders
(``builtin``), or recorded traffic such as the golden corpora of Java 4.9.4 and 5.2.0
(``--corpus``); every mutant breaks one thing about one of them. A run proves the server
survives them: it does not crash, hang, lose the answers to valid requests, answer what
must not be answered, log a traceback, or grow without bound, and a real route query keeps
getting the right answer.

Modules, in dependency order:

* ``wire``        frames as bytes, independent of the server's codec; framing predictions
* ``corpus``      seed frames read from corpus files
* ``builtin``     the built-in seed frames, made by ``namesrv.requests``
* ``bombs``       compressed register bodies that inflate far beyond their size
* ``mutators``    the seeded mutators and ``FrameForge`` (frame i of seed s)
* ``target``      the server as a child process: log tally, peak memory, exit
* ``connection``  one fuzzing connection: writes, reads, answers that must not exist
* ``stats``       counters, findings, the progress line and the summary
* ``runner``      batches over lanes, canaries, route checks, triage of log events
* ``session``     a whole session: corpus, server, run, summary
"""

from pynamesrv.simulate.fuzz.mutators import MUTATORS, FrameForge, Limits, Mutant
from pynamesrv.simulate.fuzz.runner import RunOptions
from pynamesrv.simulate.fuzz.session import FuzzConfig, make_forge, run_fuzz

__all__ = [
    "MUTATORS",
    "FrameForge",
    "FuzzConfig",
    "Limits",
    "Mutant",
    "RunOptions",
    "make_forge",
    "run_fuzz",
]
