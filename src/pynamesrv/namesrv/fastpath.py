"""GET_ROUTEINFO_BY_TOPIC answered from a request's raw header bytes, without decoding it.

Why a module of its own: this is the only place where the name server looks at request
bytes before the decoder has. The remoting server offers it each read that starts a frame
(``answer_read(data)``: all of the read's answers, or None for the normal path) and knows
nothing of what it does.

What it does: a client's route queries for one topic differ only in their ``opaque``, so the
header with the opaque's digits cut out identifies the request completely. The first query
of such a *shape* is decoded once to learn its topic and dialect (or that it does not
qualify); later ones cost two ``find``s, a slice, a dict look-up and a join, with the
request's own digits copied into a prebuilt answer. Only plain requests qualify: code 105,
flag 0, a string topic, one ``"opaque"`` member holding 1-10 digits without a leading zero
that fit Java's int, no body, JSON serialization, and no zone mode. Everything else,
misses, order configs and the 5.x start-up wait take the normal path, where behaviour is
defined, and a test feeds both paths the same random streams and requires identical bytes.

Measured in production shapes (``bench/route_query.py``: 64 and 1,000 connections x 1 in
flight walking 1,000 topics), it answers about a third more queries per second than the
normal path on the same machine; the earlier block and family paths for pipelined reads,
which no client produces, were removed.

Bounded: at most ``MAX_SHAPES`` shapes (the oldest learned goes first); a shape holds a
reference to the registry's cached answer and is rebuilt from it when the registry's route
generation moved. A read whose answers would be longer than ``max_answer_bytes`` (the write
buffer's high-water mark: pipelined queries for a topic with a large route) is left to the
normal path, which builds answers only while the peer reads them.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable
from operator import itemgetter
from time import perf_counter
from typing import Any, Final

from pynamesrv.namesrv import model
from pynamesrv.namesrv.routes import RouteInfoManager, zone_of
from pynamesrv.namesrv.stats import LATENCY_BUCKETS_S, NamesrvStats
from pynamesrv.remoting.codec import FrameError, decode_command, encode_frame, frame_head
from pynamesrv.remoting.codes import SERVER_VERSION, RequestCode, Version
from pynamesrv.remoting.command import SerializeType

INT32_MAX_DIGITS: Final = b"2147483647"  # a larger opaque is no Java int: the decoder refuses it
_LENGTHS: Final = struct.Struct(">iI")  # a frame's length word and header-length word
# Longest header remembered as a shape: route queries are a few hundred bytes (ACL signatures
# included); 65,536 shapes of megabyte headers would be an attack on memory.
MAX_SHAPE_HEADER: Final = 4096
_GENERATION, _TAIL, _HEADS, _HITS, _TOPIC = range(5)  # items of a _Shape (see its docstring)

try:  # the compiled hot loop (setup.py builds it where a C compiler exists)
    from pynamesrv.namesrv import _fastpath as _compiled

    _COMPILED_MISSING = ""
except ImportError as exc:  # pragma: no cover - the pure-Python path below does the same
    # Typed as the module (its stub is _fastpath.pyi); every use checks for None first.
    _compiled = None  # type: ignore[assignment]
    _COMPILED_MISSING = str(exc)


def compiled_loops() -> dict[str, str]:
    """Loop -> "" where its compiled C module runs, else why its Python twin does (the
    import error): ``fastpath`` (this module's hot loop), ``routed`` (model's per-topic
    registration decode). A wheel built without a C compiler has neither; the README's
    performance figures assume both."""
    return {"fastpath": _COMPILED_MISSING, "routed": model.COMPILED_MISSING}


def describe_compiled_loops() -> str:
    """The start-up line: which loops are compiled, or which Python twins run and why."""
    loops = compiled_loops()
    compiled = [name for name, missing in loops.items() if not missing]
    twins = [f"{name} ({missing})" for name, missing in loops.items() if missing]
    if not twins:
        return f"compiled loops in use: {', '.join(compiled)}"
    return (
        f"compiled loops in use: {', '.join(compiled) or 'none'}; the slower Python twins run"
        f" for {', '.join(twins)}: pynamesrv was installed without a C compiler"
        " (a py3-none-any wheel); install it from a platform wheel (make dist) for full speed"
    )


class RouteAnswerTemplate:
    """The JSON header of a successful route answer differs only in ``opaque`` (and in the
    server's configured version, fixed for a run)."""

    prefix: Final = b'{"code":0,"flag":1,"language":"JAVA","opaque":'

    def __init__(self, version: int = SERVER_VERSION) -> None:
        self.suffix = f',"serializeTypeCurrentRPC":"JSON","version":{version}}}'.encode()

    def frame(self, opaque: int, body: bytes) -> bytes:
        header = b"%b%d%b" % (self.prefix, opaque, self.suffix)
        return encode_frame(SerializeType.JSON, header, body)


class _Shape(list[Any]):
    """A learned request header without its opaque digits, and its finished answer parts.

    A list, ``[generation, tail, heads, hits, topic, standard, cached]``, so that the
    compiled loop (``_fastpath.c``) reads it by index; the properties name the items here.
    ``generation`` is the registry's route generation when ``cached`` (the registry's cache
    entry the tail was built from) was last checked; ``tail`` the answer header after the
    opaque plus the body; ``heads[n]`` the length words and header up to an opaque of n
    digits (None until built); ``hits`` answers given since the counts were last taken.
    """

    __slots__ = ()

    def __init__(self, topic: str, standard: bool) -> None:
        super().__init__((-1, b"", [None] * 11, 0, topic, standard, None))

    generation = property(itemgetter(0), lambda self, v: self.__setitem__(0, v))
    tail = property(itemgetter(1), lambda self, v: self.__setitem__(1, v))
    heads = property(itemgetter(2))
    hits = property(itemgetter(3), lambda self, v: self.__setitem__(3, v))
    topic = property(itemgetter(4))
    standard = property(itemgetter(5))
    cached = property(itemgetter(6), lambda self, v: self.__setitem__(6, v))


_DECLINED: Final = _Shape("", False)  # a shape left to the normal path (never current)


class RouteQueryFastPath:
    """The raw-header route-query answerer (see the module docstring)."""

    MAX_SHAPES: Final = 65_536

    def __init__(
        self,
        routes: RouteInfoManager,
        stats: NamesrvStats,
        cache_allowed: Callable[[], bool],
        template: RouteAnswerTemplate,
        *,
        compiled: bool = True,
        max_answer_bytes: int | None = None,
    ) -> None:
        """``cache_allowed`` says whether a cached answer is the answer now (no order
        configs, no start-up wait): checked once per read. ``template`` is the processor's,
        so both paths write the same header. ``compiled``: use ``_fastpath.c`` when it was
        built (the tests run both). ``max_answer_bytes``: the longest answers to one read
        given here (None: no limit); a longer one goes to the normal path."""
        self.routes = routes
        self._answers = routes.answers  # its route_generation is read once per read
        self.stats = stats
        self.cache_allowed = cache_allowed
        self.template = template
        self._shapes: dict[bytes, _Shape] = {}
        self._latency = stats.histogram(RequestCode.GET_ROUTEINFO_BY_TOPIC)
        self._evicted_hits: Counter[str] = Counter()  # hits of shapes dropped from _shapes
        self.max_answer_bytes = max_answer_bytes
        self.compiled = _compiled is not None and compiled
        if self.compiled:
            # On this instance only: the compiled loop, with no branch per read.
            self.answer_read = self._answer_read_compiled  # type: ignore[method-assign]

    @property
    def shapes(self) -> int:
        """How many request shapes are remembered (answered or declined)."""
        return len(self._shapes)

    def answer_one(self, header: bytes) -> bytes | None:
        """The answer frame to one request header, or None when the normal path decides."""
        return self.answer_read(encode_frame(SerializeType.JSON, header))

    def take_hits(self) -> Counter[str]:
        """Answers given per topic since the last call (the journal's route_queries)."""
        counts, self._evicted_hits = self._evicted_hits, Counter()
        for shape in self._shapes.values():
            if shape[_HITS]:
                counts[shape[_TOPIC]] += shape[_HITS]
                shape[_HITS] = 0
        return counts

    def _answer_read_compiled(self, data: bytes) -> bytes | None:
        """``answer_read`` through the compiled loop; what it cannot answer (a shape to learn
        or rebuild, or anything odd) goes to the Python one, which decides."""
        if not self.cache_allowed():
            return None
        started = perf_counter()
        done = _compiled.answer_read(
            data, self._shapes, self._answers.route_generation, self.max_answer_bytes
        )
        if done is None:
            return self._answer_read(data)
        answers, count = done
        self._observe(count, started)
        return answers

    def answer_read(self, data: bytes) -> bytes | None:
        """The answers to a read that holds only whole plain route queries with a route,
        all of them (a client's usual read), or None: then the normal path takes the read."""
        return self._answer_read(data)

    def _answer_read(self, data: bytes) -> bytes | None:
        """``answer_read`` in Python: the reference, and what the compiled loop falls back
        to."""
        if not self.cache_allowed():
            return None
        started = perf_counter()
        shapes = self._shapes
        generation = self._answers.route_generation
        out: list[bytes] = []
        answered: list[_Shape] = []
        pos, total = 0, len(data)
        room = self.max_answer_bytes
        while pos < total:
            if total - pos < 8:
                return None
            length, header_length = _LENGTHS.unpack_from(data, pos)
            frame_end = pos + 4 + length
            # No body, JSON (a non-zero high byte makes the word larger), and all arrived.
            if header_length != length - 4 or frame_end > total:
                return None
            header = data[pos + 8 : frame_end]
            pos = frame_end
            begin = header.find(b'"opaque":') + 9
            if begin < 9:
                return None
            end = header.find(b",", begin)
            if end < 0:
                end = header.find(b"}", begin)
            digits = header[begin:end]
            size = len(digits)
            if (
                not (0 < size <= 10 and digits.isdigit())
                or (digits[0] == 48 and size > 1)
                or (size == 10 and digits > INT32_MAX_DIGITS)
            ):
                return None  # negative, spaced, huge or odd: the normal path decides
            key = header[:begin] + header[end:]
            shape = shapes.get(key)
            if shape is None:
                if len(header) > MAX_SHAPE_HEADER:
                    return None  # no client sends such a query: not worth remembering
                shape = self._learn(key, header)
            if shape[_GENERATION] != generation and not self._revalidate(shape, generation):
                return None
            head = shape[_HEADS][size] or self._head(shape, size)
            if room is not None:
                room -= len(head) + size + len(shape[_TAIL])
                if room < 0:
                    return None  # longer than a write buffer: the normal path, a part at a time
            out += (head, digits, shape[_TAIL])
            answered.append(shape)
        if not answered:
            return None
        for shape in answered:
            shape[_HITS] += 1
        self._observe(len(answered), started)
        return b"".join(out)

    def _observe(self, count: int, started: float) -> None:
        """Count a read's answers; each waited as long as the whole read took to answer."""
        self.stats.route_query_hits += count
        seconds = perf_counter() - started
        latency = self._latency  # RequestHistogram.observe, inlined: this runs per read
        latency.buckets[bisect_left(LATENCY_BUCKETS_S, seconds)] += count
        latency.count += count
        latency.sum_s += seconds * count

    def _revalidate(self, shape: _Shape, generation: int) -> bool:
        """Check ``shape``'s answer against the registry's cache, rebuilding it from there
        when the route changed; False: the normal path answers (no route, or declined)."""
        if shape is _DECLINED:
            return False
        routes, key = self.routes, (shape.topic, shape.standard)
        if shape.cached is None or routes.cached_route(key) is not shape.cached:
            body = routes.route_body(shape.topic, shape.standard, None)
            if body is None:
                return False
            shape.cached = routes.cached_route(key)
            shape.tail = self.template.suffix + body
            shape.heads[:] = [None] * 11
        shape.generation = generation
        return True

    def _head(self, shape: _Shape, size: int) -> bytes:
        """Length words and answer header up to the opaque, for opaques of ``size`` digits."""
        template = self.template
        header_length = len(template.prefix) + size + len(template.suffix)
        body_length = len(shape.tail) - len(template.suffix)
        head = frame_head(SerializeType.JSON, header_length, body_length) + template.prefix
        shape.heads[size] = head
        return head

    def _learn(self, key: bytes, header: bytes) -> _Shape:
        """Decode a new shape once and remember it (or that it is declined)."""
        shape = _decode_shape(header)
        shapes = self._shapes
        if len(shapes) >= self.MAX_SHAPES:
            oldest = next(iter(shapes))  # the oldest learned goes, its counts kept
            if shapes[oldest].hits:
                self._evicted_hits[shapes[oldest].topic] += shapes[oldest].hits
            del shapes[oldest]
        shapes[key] = shape
        return shape


def _decode_shape(header: bytes) -> _Shape:
    """Learn a shape through the real decoder, so the fast path answers exactly what the
    normal path would (a header it refuses is declined here too)."""
    if header.count(b'"opaque"') != 1:
        return _DECLINED
    try:
        request = decode_command(SerializeType.JSON, header, b"")
    except FrameError:
        return _DECLINED
    topic = request.field("topic")
    if (
        request.code != RequestCode.GET_ROUTEINFO_BY_TOPIC
        or request.flag != 0
        or topic is None
        or zone_of(request.ext_fields) is not None  # a zone's filtered answer is not the plain one
    ):
        return _DECLINED
    accept = request.field("acceptStandardJsonOnly")
    standard = request.version >= Version.V4_9_4 or (accept or "").lower() == "true"
    return _Shape(topic, standard)
