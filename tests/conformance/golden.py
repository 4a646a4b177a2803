"""Golden corpus support: load recorded Java traffic, pair answers, compare our answers.

The corpora (``<shared>/golden``, ``<shared>/golden-5x``) hold frames exchanged between real
Java programs and a real Java 4.9.4 (5.2.0) NameServer, in the same format. This module is
deliberately independent of the server's own codec: frames are split, ROCKETMQ headers
decoded and JSON headers parsed here, so a codec bug in the server cannot hide itself.
Bodies are parsed with the server's lenient fastjson parser (the brief asks for it), and
the *dialect* of a body (bare vs quoted numeric keys, escaping) is extracted separately,
because the parser deliberately erases that difference.
"""

from __future__ import annotations

import base64
import json
import os
import re
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pynamesrv.remoting import fastjson

SCENARIOS: tuple[str, ...] = (
    "register-master-slave",
    "register-compressed",
    "serialize-rocketmq",
    "unregister",
    "admin",
    "clients",
    "errors",
)
# The 5.2.0 corpus (golden-5x/README.md), in the README's order.
SCENARIOS_5X: tuple[str, ...] = (
    "register-admin",
    "acting-master",
    "zone-route",
    "split-register",
    "compat-old-namesrv",
    "namesrv-restart",
)

FLAG_RESPONSE = 1
FLAG_ONEWAY = 2
SERIALIZE_JSON = 0
SERIALIZE_ROCKETMQ = 1
SERIALIZE_NAMES = {SERIALIZE_JSON: "JSON", SERIALIZE_ROCKETMQ: "ROCKETMQ"}
CODE_SYSTEM_ERROR = 1
CODE_GET_NAMESRV_CONFIG = 319

# LanguageCode bytes of the ROCKETMQ header (spec/protocol.md section 9).
LANGUAGES: tuple[str, ...] = (
    "JAVA",
    "CPP",
    "DOTNET",
    "PYTHON",
    "DELPHI",
    "ERLANG",
    "RUBY",
    "OTHER",
    "HTTP",
    "GO",
    "PHP",
    "OMS",
    "RUST",
    "NODE_JS",
)

# GET_NAMESRV_CONFIG keys that depend on how the server was started (golden README), plus
# pynamesrv-only keys the replay sets to start it (as the recorded Java version, without the
# HTTP port): Java never reports them, pynamesrv reports them because they are not default.
CONFIG_VOLATILE_KEYS = frozenset(
    {
        "listenPort", "rocketmqHome", "kvConfigPath", "configStorePath",
        "rocketmq.remoting.version", "httpPort",
    }
)  # fmt: skip

# Collections whose order is Java HashMap/HashSet iteration order: compared as multisets.
ORDERLESS_LIST_KEYS = frozenset({"topicList", "brokerDatas", "queueDatas"})
ORDERLESS_SET_MAPS = frozenset({"clusterAddrTable"})

# "<java.class.Name>: message, frame": the remark of a SYSTEM_ERROR made from an exception.
_JAVA_EXCEPTION_REMARK = re.compile(r"^(?:[a-z_$][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error)\b")
_ROCKETMQ_FIXED = struct.Struct(">hbhiii")


# --------------------------------------------------------------------------- locations


def repo_root() -> Path:
    """The project checkout this file lives in (tests/conformance/golden.py)."""
    return Path(__file__).resolve().parents[2]


def shared_dir() -> Path:
    """``<repo>/../shared`` unless PYNAMESRV_SHARED points elsewhere (never a fixed path)."""
    env = os.environ.get("PYNAMESRV_SHARED")
    return Path(env) if env else repo_root().parent / "shared"


def golden_dir() -> Path:
    return shared_dir() / "golden"


def golden_5x_dir() -> Path:
    return shared_dir() / "golden-5x"


# --------------------------------------------------------------------------- wire format


@dataclass(frozen=True)
class WireFrame:
    """One complete frame as bytes, split into serialize byte, header and body."""

    raw: bytes
    serialize: int
    header_raw: bytes
    body: bytes

    @classmethod
    def parse(cls, raw: bytes) -> WireFrame:
        """Split a whole frame (length word included); ValueError if it is not one."""
        if len(raw) < 8:
            raise ValueError(f"frame of {len(raw)} bytes is shorter than 8")
        (length,) = struct.unpack_from(">i", raw, 0)
        if length != len(raw) - 4:
            raise ValueError(f"length word {length} but {len(raw) - 4} bytes follow it")
        (word,) = struct.unpack_from(">I", raw, 4)
        header_len = word & 0xFFFFFF
        if 8 + header_len > len(raw):
            raise ValueError(f"header length {header_len} exceeds the frame")
        return cls(raw, word >> 24, raw[8 : 8 + header_len], raw[8 + header_len :])

    def header(self) -> dict[str, Any]:
        """The decoded header; JSON strictly (clients use strict parsers), ROCKETMQ binary."""
        if self.serialize == SERIALIZE_JSON:
            return parse_json_header(self.header_raw)
        if self.serialize == SERIALIZE_ROCKETMQ:
            return decode_rocketmq_header(self.header_raw)
        raise ValueError(f"unknown serialize type {self.serialize}")


def build_frame(serialize: int, header: bytes, body: bytes = b"") -> bytes:
    """Assemble a frame; used to build expected answers and mutated copies in tests."""
    return (
        struct.pack(">iI", 4 + len(header) + len(body), (serialize << 24) | len(header))
        + header
        + body
    )


def json_header_bytes(header: Mapping[str, Any]) -> bytes:
    """A JSON header as Java writes it: compact, members in alphabetical order."""
    return json.dumps(
        dict(sorted(header.items())), separators=(",", ":"), ensure_ascii=False
    ).encode()


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate member {key!r} in JSON header")
        out[key] = value
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-JSON constant {name} in header")


def parse_json_header(raw: bytes) -> dict[str, Any]:
    """Strict RFC 8259 parse of a JSON header (order kept, duplicates rejected)."""
    value = json.loads(
        raw.decode("utf-8"),
        object_pairs_hook=_reject_duplicates,
        parse_constant=_reject_constant,
    )
    if not isinstance(value, dict):
        raise ValueError("JSON header is not an object")
    return value


def decode_rocketmq_header(raw: bytes) -> dict[str, Any]:
    """Decode the binary header into the corpus' form (remark/extFields only if non-empty)."""
    if len(raw) < _ROCKETMQ_FIXED.size + 4:
        raise ValueError(f"ROCKETMQ header of {len(raw)} bytes is too short")
    code, lang, version, opaque, flag, remark_len = _ROCKETMQ_FIXED.unpack_from(raw, 0)
    pos = _ROCKETMQ_FIXED.size
    out: dict[str, Any] = {
        "code": code,
        "language": LANGUAGES[lang] if 0 <= lang < len(LANGUAGES) else f"UNKNOWN({lang})",
        "version": version,
        "opaque": opaque,
        "flag": flag,
    }
    if remark_len < 0 or pos + remark_len + 4 > len(raw):
        raise ValueError(f"ROCKETMQ remark length {remark_len} exceeds the header")
    if remark_len:
        out["remark"] = raw[pos : pos + remark_len].decode("utf-8")
    pos += remark_len
    (ext_len,) = struct.unpack_from(">i", raw, pos)
    pos += 4
    if ext_len < 0 or pos + ext_len != len(raw):
        raise ValueError(f"ROCKETMQ ext length {ext_len} does not end the header")
    ext: dict[str, str] = {}
    end = pos + ext_len
    while pos < end:
        (klen,) = struct.unpack_from(">h", raw, pos)
        key = raw[pos + 2 : pos + 2 + klen].decode("utf-8")
        pos += 2 + klen
        (vlen,) = struct.unpack_from(">i", raw, pos)
        ext[key] = raw[pos + 4 : pos + 4 + vlen].decode("utf-8")
        pos += 4 + vlen
    if pos != end:
        raise ValueError("ROCKETMQ ext entries overrun the ext section")
    if ext_len:
        out["extFields"] = ext
    return out


def encode_rocketmq_header(header: Mapping[str, Any]) -> bytes:
    """Inverse of decode_rocketmq_header (for expected answers and mutation tests)."""
    remark = (header.get("remark") or "").encode()
    ext = b""
    for key, value in (header.get("extFields") or {}).items():
        k, v = key.encode(), str(value).encode()
        ext += struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v
    lang = header.get("language", "JAVA")
    return (
        _ROCKETMQ_FIXED.pack(
            header.get("code", 0),
            LANGUAGES.index(lang) if lang in LANGUAGES else 7,
            header.get("version", 0),
            header.get("opaque", 0),
            header.get("flag", 0),
            len(remark),
        )
        + remark
        + struct.pack(">i", len(ext))
        + ext
    )


def build_answer(serialize: int, header: Mapping[str, Any], body: bytes = b"") -> WireFrame:
    """An answer frame in Java's form, used where a deviation replaces the recorded one."""
    raw_header = (
        encode_rocketmq_header(header)
        if serialize == SERIALIZE_ROCKETMQ
        else json_header_bytes(header)
    )
    return WireFrame.parse(build_frame(serialize, raw_header, body))


# --------------------------------------------------------------------------- corpus


@dataclass(frozen=True)
class Frame:
    """One recorded frame (a line of ``<scenario>.jsonl``)."""

    seq: int
    conn: int
    dir: str
    raw: bytes
    header: dict[str, Any] | None
    body: bytes
    step: str
    incomplete: bool = False
    malformed: str | None = None
    t: float | None = None  # seconds since the recording started

    @property
    def code(self) -> int | None:
        return None if self.header is None else self.header.get("code", 0)

    @property
    def opaque(self) -> int | None:
        return None if self.header is None else self.header.get("opaque", 0)

    @property
    def flag(self) -> int:
        return 0 if self.header is None else int(self.header.get("flag", 0) or 0)

    @property
    def is_request(self) -> bool:
        """A decodable, complete c2s frame without the response bit."""
        return (
            self.dir == "c2s"
            and self.header is not None
            and not self.incomplete
            and self.malformed is None
            and not self.flag & FLAG_RESPONSE
        )

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def wire(self) -> WireFrame:
        return WireFrame.parse(self.raw)


@dataclass(frozen=True)
class Event:
    """One line of ``<scenario>.events.jsonl`` (step marker, open or close)."""

    after_seq: int
    event: str
    conn: int | None = None
    by: str | None = None
    how: str | None = None
    t: float | None = None
    step: str | None = None


@dataclass
class Scenario:
    """A scenario: frames, events, the merged timeline and the request/answer pairing."""

    name: str
    frames: list[Frame]
    events: list[Event]
    answer_of: dict[int, Frame] = field(default_factory=dict)  # request seq -> s2c frame
    request_of: dict[int, Frame] = field(default_factory=dict)  # s2c seq -> request frame

    @property
    def by_seq(self) -> dict[int, Frame]:
        return {f.seq: f for f in self.frames}

    def timeline(self) -> Iterator[Frame | Event]:
        """Frames and events merged: an event with after_seq n comes after frame n."""
        events = sorted(self.events, key=lambda ev: ev.after_seq)  # stable: file order kept
        ei = 0
        for frame in self.frames:
            while ei < len(events) and events[ei].after_seq < frame.seq:
                yield events[ei]
                ei += 1
            yield frame
        yield from events[ei:]

    def first_close(self) -> dict[int, Event]:
        """Per conn, the close event that came first (who hung up first)."""
        out: dict[int, Event] = {}
        for ev in self.events:
            if ev.event == "close" and ev.conn is not None and ev.conn not in out:
                out[ev.conn] = ev
        return out


def _frame_from_json(obj: Mapping[str, Any]) -> Frame:
    return Frame(
        seq=obj["seq"],
        conn=obj["conn"],
        dir=obj["dir"],
        raw=base64.b64decode(obj["frame_b64"]),
        header=obj["header"],
        body=base64.b64decode(obj.get("body_b64") or ""),
        step=obj.get("step") or "",
        incomplete=bool(obj.get("incomplete")),
        malformed=obj.get("malformed"),
        t=obj.get("t"),
    )


def pair_answers(frames: Sequence[Frame]) -> tuple[dict[int, Frame], dict[int, Frame]]:
    """Pair each s2c frame with the latest earlier unanswered request of its (conn, opaque).

    "Latest" matters in errors.jsonl, where conn 8 sends two requests with opaque 0 (a ``{}``
    header and a real one) and only the second is answered.
    """
    pending: dict[tuple[int, int], list[Frame]] = {}
    answer_of: dict[int, Frame] = {}
    request_of: dict[int, Frame] = {}
    for frame in frames:
        if frame.dir == "c2s" and frame.is_request:
            pending.setdefault((frame.conn, frame.opaque or 0), []).append(frame)
        elif frame.dir == "s2c":
            stack = pending.get((frame.conn, frame.opaque or 0))
            if not stack:
                raise ValueError(f"s2c seq {frame.seq} answers no request")
            request = stack.pop()
            answer_of[request.seq] = frame
            request_of[frame.seq] = request
    return answer_of, request_of


def load_scenario(name: str, directory: Path | None = None) -> Scenario:
    """Read ``<name>.jsonl`` and ``<name>.events.jsonl``; frames must be seq 1..N."""
    base = directory or golden_dir()
    with (base / f"{name}.jsonl").open(encoding="utf-8") as fh:
        frames = [_frame_from_json(json.loads(line)) for line in fh if line.strip()]
    with (base / f"{name}.events.jsonl").open(encoding="utf-8") as fh:
        events = [
            Event(
                after_seq=obj["after_seq"],
                event=obj["event"],
                conn=obj.get("conn"),
                by=obj.get("by"),
                how=obj.get("how"),
                step=obj.get("step"),
                t=obj.get("t"),
            )
            for obj in map(json.loads, filter(str.strip, fh))
        ]
    if [f.seq for f in frames] != list(range(1, len(frames) + 1)):
        raise ValueError(f"{name}: frame seq numbers are not 1..{len(frames)}")
    answer_of, request_of = pair_answers(frames)
    return Scenario(name, frames, events, answer_of, request_of)


# --------------------------------------------------------------------------- dialect


@dataclass(frozen=True)
class Dialect:
    """Text-level traits of a JSON body that a data comparison cannot see.

    Old clients parse bare numeric keys only with lax parsers and Go splits ``brokerAddrs``
    by hand, so *how* the body is written matters, not just what it says.
    """

    bare_numeric_keys: bool = False
    quoted_numeric_keys: bool = False
    escaped_slash: bool = False
    raw_slash: bool = False
    unicode_escapes: bool = False
    lowercase_unicode_escapes: bool = False
    raw_non_ascii: bool = False
    whitespace: bool = False

    def differences(self, other: Dialect) -> list[tuple[str, bool, bool]]:
        return [
            (name, getattr(self, name), getattr(other, name))
            for name in self.__dataclass_fields__
            if getattr(self, name) != getattr(other, name)
        ]


_NUMERIC = re.compile(r"-?\d+")
# A string literal (kept whole) or a bare integer member name after '{' or ','.
_BARE_KEY = re.compile(r'"(?:[^"\\]|\\.)*"|([{,])(-?\d+):')


def quote_bare_keys(text: str) -> str:
    """The same JSON with bare integer member names quoted (``{0:"a"}`` -> ``{"0":"a"}``):
    a legacy-dialect recording as the standard dialect writes its keys."""
    return _BARE_KEY.sub(lambda m: m.group(0) if m.group(1) is None else
                         f'{m.group(1)}"{m.group(2)}":', text)  # fmt: skip


def dialect_of(text: str) -> Dialect:
    """Scan JSON(-ish) text once and record key quoting, escaping and whitespace."""
    traits: dict[str, bool] = {}
    stack: list[str] = []  # '{' or '['
    expect_key = False
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            chars: list[str] = []
            while j < n and text[j] != '"':
                if text[j] == "\\" and j + 1 < n:
                    esc = text[j + 1]
                    if esc == "/":
                        traits["escaped_slash"] = True
                    elif esc == "u":
                        hexdigits = text[j + 2 : j + 6]
                        traits["unicode_escapes"] = True
                        if hexdigits != hexdigits.upper():
                            traits["lowercase_unicode_escapes"] = True
                        j += 4
                    chars.append(esc)
                    j += 2
                    continue
                if text[j] == "/":
                    traits["raw_slash"] = True
                elif ord(text[j]) > 127:
                    traits["raw_non_ascii"] = True
                chars.append(text[j])
                j += 1
            if expect_key and _NUMERIC.fullmatch("".join(chars)):
                traits["quoted_numeric_keys"] = True
            expect_key = False
            i = j + 1
            continue
        if c in "{[":
            stack.append(c)
            expect_key = c == "{"
        elif c in "}]":
            if stack:
                stack.pop()
            expect_key = False
        elif c == ",":
            expect_key = bool(stack) and stack[-1] == "{"
        elif c in " \t\r\n":
            traits["whitespace"] = True
        elif expect_key and (c.isdigit() or c == "-"):
            match = _NUMERIC.match(text, i)
            if match:
                traits["bare_numeric_keys"] = True
                i = match.end()
                expect_key = False
                continue
        elif c == ":":
            expect_key = False
        i += 1
    return Dialect(**traits)


# --------------------------------------------------------------------------- comparison


@dataclass(frozen=True)
class Problem:
    """One difference: which field, what the recording (or deviation) says, what we got."""

    field: str
    expected: Any
    got: Any

    def __str__(self) -> str:
        return f"{self.field}: expected {self.expected!r}, got {self.got!r}"


def strict_equal(a: Any, b: Any) -> bool:
    """Equality that does not let True == 1 or 1 == 1.0 slip through."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(strict_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def is_java_exception_remark(remark: Any) -> bool:
    """True for remarks like ``org.x.FooException: msg, Foo.java:12`` (JVM-specific text)."""
    return isinstance(remark, str) and bool(_JAVA_EXCEPTION_REMARK.match(remark))


def compare_headers(expected: Mapping[str, Any], got: Mapping[str, Any]) -> list[Problem]:
    """Every member exactly, except extFields order and Java exception remark text."""
    problems: list[Problem] = []
    for key in sorted(set(expected) | set(got)):
        if key not in got:
            problems.append(Problem(f"header.{key}", expected[key], "<absent>"))
        elif key not in expected:
            problems.append(Problem(f"header.{key}", "<absent>", got[key]))
        elif (
            key == "remark"
            and expected.get("code") == CODE_SYSTEM_ERROR
            and is_java_exception_remark(expected[key])
        ):
            continue
        elif key == "extFields" and isinstance(expected[key], dict) and isinstance(got[key], dict):
            exp_ext, got_ext = expected[key], got[key]
            for ext_key in sorted(set(exp_ext) | set(got_ext)):
                e = exp_ext.get(ext_key, "<absent>")
                g = got_ext.get(ext_key, "<absent>")
                if not strict_equal(e, g):
                    problems.append(Problem(f"header.extFields.{ext_key}", e, g))
        elif not strict_equal(expected[key], got[key]):
            problems.append(Problem(f"header.{key}", expected[key], got[key]))
    return problems


def compare_json_header_text(expected_raw: bytes, got_raw: bytes) -> list[Problem]:
    """Java writes header members alphabetically with no whitespace; compare that form.

    Clients do not care about member order, but it is deterministic in 4.9.4 and cheap to
    match, and a difference usually means the header was not built the Java way.
    """
    problems: list[Problem] = []
    exp_keys, got_keys = list(parse_json_header(expected_raw)), list(parse_json_header(got_raw))
    # members missing on one side are reported by compare_headers; order the common ones
    exp_order = [k for k in exp_keys if k in got_keys]
    got_order = [k for k in got_keys if k in exp_keys]
    if exp_order != got_order:
        problems.append(Problem("header.memberOrder", exp_order, got_order))
    exp_ws = dialect_of(expected_raw.decode()).whitespace
    got_ws = dialect_of(got_raw.decode()).whitespace
    if exp_ws != got_ws:
        problems.append(Problem("header.whitespace", exp_ws, got_ws))
    return problems


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def normalize_body(value: Any, key: str | None = None) -> Any:
    """Sort the collections whose order is Java hash order; everything else stays."""
    if isinstance(value, dict):
        return {
            k: (
                {
                    ck: sorted(cv, key=_canonical) if isinstance(cv, list) else cv
                    for ck, cv in v.items()
                }
                if k in ORDERLESS_SET_MAPS and isinstance(v, dict)
                else normalize_body(v, k)
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        items = [normalize_body(v) for v in value]
        return sorted(items, key=_canonical) if key in ORDERLESS_LIST_KEYS else items
    return value


def _list_by_broker(items: list[Any]) -> dict[str, Any] | None:
    names = [i.get("brokerName") for i in items if isinstance(i, dict)]
    unique = len(set(names)) == len(names) == len(items)
    if unique and all(isinstance(n, str) for n in names):
        return dict(zip(names, items, strict=True))
    return None


def diff_data(expected: Any, got: Any, path: str = "body") -> list[Problem]:
    """Path-precise differences between two normalized JSON values."""
    if isinstance(expected, dict) and isinstance(got, dict):
        out: list[Problem] = []
        for k in sorted(set(expected) | set(got), key=str):
            if k not in got:
                out.append(Problem(f"{path}.{k}", expected[k], "<absent>"))
            elif k not in expected:
                out.append(Problem(f"{path}.{k}", "<absent>", got[k]))
            else:
                out.extend(diff_data(expected[k], got[k], f"{path}.{k}"))
        return out
    if isinstance(expected, list) and isinstance(got, list):
        leaf = path.rsplit(".", 1)[-1]
        if leaf in ORDERLESS_LIST_KEYS or path.split(".")[-2:-1] == ["clusterAddrTable"]:
            exp_by = _list_by_broker(expected)
            got_by = _list_by_broker(got)
            if exp_by is not None and got_by is not None:
                return diff_data(exp_by, got_by, path)
            missing = [x for x in expected if x not in got]
            extra = [x for x in got if x not in expected]
            if missing or extra or len(expected) != len(got):
                return [
                    Problem(
                        path,
                        f"missing {missing!r}",
                        f"extra {extra!r}, {len(got)} items instead of {len(expected)}",
                    )
                ]
            return []
        if len(expected) != len(got):
            return [Problem(f"{path}.length", len(expected), len(got))]
        out = []
        for idx, (e, g) in enumerate(zip(expected, got, strict=True)):
            out.extend(diff_data(e, g, f"{path}[{idx}]"))
        return out
    if strict_equal(expected, got):
        return []
    return [Problem(path, expected, got)]


def parse_properties(body: bytes) -> dict[str, str]:
    """GET_NAMESRV_CONFIG body: ``key=value`` lines (no escaping, as Java writes them)."""
    out: dict[str, str] = {}
    for line in body.decode("utf-8").splitlines():
        if line:
            key, _, value = line.partition("=")
            out[key] = value
    return out


def compare_config(
    expected: bytes,
    got: bytes,
    *,
    ignore: frozenset[str] = CONFIG_VOLATILE_KEYS,
    exact: Mapping[str, str] | None = None,
) -> list[Problem]:
    """Compare as a set of key=value lines; ``exact`` pins values of otherwise ignored keys."""
    exp, ours = parse_properties(expected), parse_properties(got)
    problems = [
        Problem(f"body.config.{k}", exp.get(k, "<absent>"), ours.get(k, "<absent>"))
        for k in sorted(set(exp) | set(ours))
        if k not in ignore and exp.get(k) != ours.get(k)
    ]
    for key, value in (exact or {}).items():
        if ours.get(key) != value:
            problems.append(Problem(f"body.config.{key}", value, ours.get(key, "<absent>")))
    return problems


def compare_body(
    expected: bytes,
    got: bytes,
    *,
    request_code: int | None,
    config_exact: Mapping[str, str] | None = None,
) -> list[Problem]:
    """Bodies as data (hash-ordered collections as multisets) plus their dialect."""
    if request_code == CODE_GET_NAMESRV_CONFIG and (expected or got):
        if not expected or not got:
            return [
                Problem("body", expected.decode(errors="replace"), got.decode(errors="replace"))
            ]
        return compare_config(expected, got, exact=config_exact)
    if not expected and not got:
        return []
    if not expected or not got:
        return [Problem("body", expected.decode(errors="replace"), got.decode(errors="replace"))]
    try:
        exp_data = fastjson.loads(expected)
    except ValueError:
        return [] if expected == got else [Problem("body.bytes", expected, got)]
    try:
        got_data = fastjson.loads(got)
    except ValueError as exc:
        return [Problem("body", "JSON text", f"unparseable ({exc}): {got[:200]!r}")]
    problems = diff_data(normalize_body(exp_data), normalize_body(got_data))
    exp_dialect = dialect_of(expected.decode("utf-8"))
    got_dialect = dialect_of(got.decode("utf-8", errors="replace"))
    problems.extend(
        Problem(f"body.dialect.{name}", e, g) for name, e, g in exp_dialect.differences(got_dialect)
    )
    return problems


def compare_answer(
    expected: WireFrame,
    got: WireFrame,
    *,
    request_code: int | None,
    config_exact: Mapping[str, str] | None = None,
) -> list[Problem]:
    """Everything the golden README calls deterministic about one answer frame."""
    if got.serialize != expected.serialize:
        return [
            Problem(
                "serializeType",
                SERIALIZE_NAMES.get(expected.serialize, expected.serialize),
                SERIALIZE_NAMES.get(got.serialize, got.serialize),
            )
        ]
    try:
        got_header = got.header()
    except (ValueError, UnicodeDecodeError, struct.error) as exc:
        return [Problem("header", "a decodable header", f"{exc}: {got.header_raw[:200]!r}")]
    problems = compare_headers(expected.header(), got_header)
    if expected.serialize == SERIALIZE_JSON:
        problems.extend(compare_json_header_text(expected.header_raw, got.header_raw))
    problems.extend(
        compare_body(expected.body, got.body, request_code=request_code, config_exact=config_exact)
    )
    return problems
