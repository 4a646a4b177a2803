"""report.html read back as a reader sees it, for the report tests."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser


@dataclass
class Figure:
    classes: dict[str, list[str]] = field(default_factory=dict)  # svg text by class
    caption: str = ""


class Page(HTMLParser):
    """The report as a reader sees it: visible text, headline cards, and per chart (each
    ``<figure>``) its SVG texts by class and the caption under it."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text: list[str] = []
        self.cards: dict[str, str] = {}
        self.figures: list[Figure] = []
        self.svgs = 0
        self._stack: list[tuple[str, dict[str, str | None]]] = []
        self._card: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "meta":
            return
        self._stack.append((tag, attributes))
        if tag == "figure":
            self.figures.append(Figure())
        if tag == "svg":
            self.svgs += 1
        if tag == "div" and attributes.get("class") == "card":
            self._card = []

    def handle_endtag(self, tag: str) -> None:
        while self._stack:
            top, _ = self._stack.pop()
            if top == tag:
                break
        if tag == "div" and self._card is not None:
            self.cards[self._card[0]] = self._card[1]
            self._card = None

    def handle_data(self, data: str) -> None:
        if not self._stack or self._stack[-1][0] == "style":
            return
        self.text.append(data)
        if self._card is not None:
            self._card.append(data)
        tags = [t for t, _ in self._stack]
        if "figure" not in tags:
            return
        figure = self.figures[-1]
        if "figcaption" in tags:
            figure.caption += data
        elif self._stack[-1][0] == "text":
            css = self._stack[-1][1].get("class") or ""
            figure.classes.setdefault(css, []).append(data)


RAW_NUMBER = re.compile(r"\d\.\d{3,}|\d{10,}")  # 0.98234, 1234.567, epoch s or ms


def raw_numbers(page: Page) -> list[str]:
    """Unrounded floats and epoch numbers a reader would see (tooltips included)."""
    return RAW_NUMBER.findall(" ".join(page.text))


def assert_charts_readable(page: Page) -> None:
    """Every chart: ticks labelled on both axes, a title per axis, and under it one line
    ``Good: … Bad: …``."""
    assert page.figures and page.svgs == len(page.figures)
    for figure in page.figures:
        assert len(figure.classes.get("tick", [])) >= 4, figure
        assert len(figure.classes.get("axis-title", [])) == 2, figure
        assert re.fullmatch(r"Good: .+\. Bad: .+\.", figure.caption), figure.caption
