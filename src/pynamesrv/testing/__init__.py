"""Synthetic deployments for tests and benchmarks: journals with their expected answers.

``generate`` simulates name servers and brokers and writes each instance's journal as the
server writes it; ``GroundTruth`` holds the rows every pipeline table must have, computed
from the simulation (``truth``), never from the files. Split by job: ``plan`` decides what
happens, ``simulator`` runs one instance over it, ``truth`` computes the expected tables.

Above ``pipeline`` in the layers (it names the pipeline's tables), beside ``app``: the
product never imports it; the CLI's ``pipeline generate``, the tests and ``bench/`` do.
"""

from pynamesrv.testing.generate import generate
from pynamesrv.testing.truth import GroundTruth

__all__ = ["GroundTruth", "generate"]
