"""What a fuzz run counted and found, and how it is shown (a progress line, a JSON summary)."""

from __future__ import annotations

import base64
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from pynamesrv.simulate.fuzz.mutators import Mutant

FRAME_B64_LIMIT: Final = 4096  # longer frames are shown cut; --show regenerates them whole
SAMPLES_PER_KIND: Final = 20

# Findings that make the run fail (exit status 1). "rss" fails only with a stated bound.
FAILING_KINDS: Final = frozenset(
    {
        "crash",
        "hang",
        "stall",
        "check_failed",
        "lost_answer",
        "silent_answered",
        "unreadable_answer",
        "log",
        "rss",
    }
)


@dataclass
class Finding:
    """One failure, with the frame that caused it when it is known."""

    # crash, hang (a batch check unanswered), stall (a canary unanswered), check_failed,
    # lost_answer, silent_answered, unreadable_answer, log (traceback/fatal), log_warning, rss
    kind: str
    detail: str
    batch: int | None = None
    index: int | None = None
    mutator: str | None = None
    seed_label: str | None = None
    frame_b64: str | None = None
    frame_len: int | None = None

    @classmethod
    def of(cls, kind: str, detail: str, mutant: Mutant | None, batch: int | None) -> Finding:
        if mutant is None:
            return cls(kind, detail, batch)
        shown = mutant.data[: FRAME_B64_LIMIT * 3 // 4]
        return cls(
            kind,
            detail,
            batch,
            mutant.index,
            mutant.mutator,
            mutant.seed_label,
            base64.b64encode(shown).decode(),
            len(mutant.data),
        )


@dataclass
class FuzzStats:
    """Counters of one run; the runner owns it, the progress line reads it."""

    frames_total: int = 0
    frames: int = 0
    bytes_sent: int = 0
    writes: int = 0
    connections: int = 0
    connect_failures: int = 0
    closed_by_server: int = 0
    answers: int = 0
    unreadable_answers: int = 0
    batches: int = 0
    checks: int = 0
    checks_ok: int = 0
    check_max_s: float = 0.0
    canaries: int = 0
    canaries_ok: int = 0
    silence_probes: int = 0
    hangs: int = 0
    crashed: bool = False
    peak_rss_kib: int = 0
    server_bad_log_events: int | None = None  # None: the server is not ours to watch
    elapsed_s: float = 0.0
    by_mutator: Counter[str] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    finding_counts: Counter[str] = field(default_factory=Counter)

    def add(self, finding: Finding) -> None:
        self.finding_counts[finding.kind] += 1
        if sum(1 for f in self.findings if f.kind == finding.kind) < SAMPLES_PER_KIND:
            self.findings.append(finding)

    @property
    def failed(self) -> bool:
        return any(self.finding_counts[kind] for kind in FAILING_KINDS)

    def progress_line(self) -> str:
        rate = self.frames / self.elapsed_s if self.elapsed_s else 0.0
        server = ""
        if self.server_bad_log_events is not None:
            server = (
                f" | server peak RSS {self.peak_rss_kib / 1024:.0f} MiB, "
                f"bad log events {self.server_bad_log_events}"
            )
        return (
            f"fuzz: {self.frames:,}/{self.frames_total:,} frames ({rate:,.0f}/s), "
            f"{self.answers:,} answers, {self.closed_by_server:,} closed by server, "
            f"checks {self.checks_ok}/{self.checks}, canaries {self.canaries_ok}/{self.canaries}, "
            f"hangs {self.hangs}, stalls {self.finding_counts['stall']}, "
            f"findings {sum(self.finding_counts.values())}{server}"
        )

    def summary(self) -> dict[str, Any]:
        return {
            "frames": self.frames,
            "frames_requested": self.frames_total,
            "seconds": round(self.elapsed_s, 1),
            "frames_per_s": round(self.frames / self.elapsed_s) if self.elapsed_s else None,
            "bytes_sent": self.bytes_sent,
            "writes": self.writes,
            "connections": self.connections,
            "connect_failures": self.connect_failures,
            "closed_by_server": self.closed_by_server,
            "answers": self.answers,
            "unreadable_answers": self.unreadable_answers,
            "batches": self.batches,
            "checks": {
                "done": self.checks,
                "ok": self.checks_ok,
                "max_s": round(self.check_max_s, 3),
            },
            "canaries": {"sent": self.canaries, "ok": self.canaries_ok},
            "silence_probes": self.silence_probes,
            "hangs": self.hangs,
            "stalls": self.finding_counts["stall"],
            "crashed": self.crashed,
            "peak_rss_mib": round(self.peak_rss_kib / 1024, 1) if self.peak_rss_kib else None,
            "by_mutator": dict(sorted(self.by_mutator.items())),
            "finding_counts": dict(sorted(self.finding_counts.items())),
            "findings": [asdict(f) for f in self.findings],
            "failed": self.failed,
        }
