"""Where a chart's words cover its data, measured on the drawn figure (matplotlib's own boxes, in pixels).

Words: every text in an axes (annotations with their boxes, value labels), the tick labels and the
legends. Data: lines (their drawn path, steps included), bars and filled areas. What a chart marks
as drawn behind the data (gid "background": the story's dashed lines, the shaded spans) and the grid
may be crossed; data may not. A line counts as covered when its path enters the text's box, a bar or
area when its outline does.

    with checked_charts() as found:   # every Figure.savefig in the block is checked before it saves
        engine.report.write(...)
    assert found.problems == []
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from matplotlib import cbook
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.path import Path as MplPath
from matplotlib.transforms import Bbox

BACKGROUND = "background"
SHRINK = 1.0
"""Pixels taken off each side of a word's box: touching an edge is not covering."""


def _shrunk(box: Bbox) -> Bbox:
    return Bbox.from_extents(box.x0 + SHRINK, box.y0 + SHRINK, box.x1 - SHRINK, box.y1 - SHRINK)


def drawn_tick_labels(axis: Any) -> list[Any]:
    """The tick labels matplotlib draws: a locator may return a tick beyond the view (an integer locator's
    6 above a y limit of 5.25); its label has text and is `visible`, but Axis.draw leaves out every tick
    outside the view interval, so it covers nothing."""
    out = []
    for side in (axis.xaxis, axis.yaxis):
        low, high = sorted(side.get_view_interval())
        slack = (high - low) * 1e-9
        for location, label in zip(side.get_ticklocs(), side.get_ticklabels(), strict=False):
            if low - slack <= location <= high + slack and label.get_visible() and label.get_text().strip():
                out.append(label)
    return out


def words(figure: Figure, renderer: Any) -> list[tuple[str, Bbox, Any]]:
    """(what, box in pixels, axes or None) of every word drawn on the figure."""
    found: list[tuple[str, Bbox, Any]] = []
    for axis in figure.axes:
        for text in axis.texts:
            if text.get_visible() and text.get_text().strip():
                patch = text.get_bbox_patch()
                box = patch.get_window_extent(renderer) if patch is not None else text.get_window_extent(renderer)
                found.append((f"label {text.get_text()!r}", box, axis))
        for tick in drawn_tick_labels(axis):
            found.append((f"tick label {tick.get_text()!r}", tick.get_window_extent(renderer), None))
        legend = axis.get_legend()
        if legend is not None:
            found.append(("the legend", legend.get_window_extent(renderer), None))
    for legend in figure.legends:
        found.append(("the figure's legend", legend.get_window_extent(renderer), None))
    return found


def _line_path(line: Line2D) -> MplPath | None:
    xy = np.asarray(line.get_xydata(), dtype=float)
    if len(xy) == 0:
        return None
    style = line.get_drawstyle() or "default"
    if style.startswith("steps"):
        xs, ys = cbook.STEP_LOOKUP_MAP[style](xy[:, 0], xy[:, 1])
        xy = np.column_stack([xs, ys])
    display = line.get_transform().transform(xy)
    display = display[np.isfinite(display).all(axis=1)]
    return MplPath(display) if len(display) > 1 else None


def data(figure: Figure, renderer: Any) -> list[tuple[str, Any, Any]]:
    """(what, test(box) -> bool, axes) for every piece of data drawn on the figure's axes."""
    found: list[tuple[str, Any, Any]] = []
    for axis in figure.axes:
        for line in axis.lines:
            if line.get_gid() == BACKGROUND or not line.get_visible():
                continue
            path = _line_path(line)
            if path is not None:
                found.append((f"line {line.get_label()!r}", lambda box, path=path: path.intersects_bbox(box, False),
                              axis))
        for patch in axis.patches:
            if patch.get_gid() == BACKGROUND or not isinstance(patch, Rectangle) or not patch.get_visible():
                continue
            extent = patch.get_window_extent(renderer)
            if extent.width > 0 and extent.height > 0:
                found.append((f"bar {patch.get_label()!r} at {extent.bounds}",
                              lambda box, extent=extent: extent.overlaps(box), axis))
        for collection in axis.collections:
            if collection.get_gid() == BACKGROUND or not collection.get_visible():
                continue
            transform = collection.get_transform()
            for path in collection.get_paths():
                shown = transform.transform_path(path)
                found.append((f"area {collection.get_label()!r}",
                              lambda box, shown=shown: shown.intersects_bbox(box, True), axis))
    return found


def problems(figure: Figure) -> list[str]:
    """Each word that covers data, and each pair of words that cover each other."""
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    drawn_words = words(figure, renderer)
    drawn_data = data(figure, renderer)
    found = []
    for what, box, _ in drawn_words:
        inner = _shrunk(box)
        found += [f"{what} covers {piece}" for piece, covers, _ in drawn_data if covers(inner)]
    shrunk = [(what, _shrunk(box)) for what, box, _ in drawn_words]
    for index, (what, box) in enumerate(shrunk):
        found += [f"{what} covers {other}" for other, other_box in shrunk[index + 1:] if box.overlaps(other_box)]
    return found


@dataclass
class Checked:
    charts: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    figures: dict[str, Figure] = field(default_factory=dict)


@contextmanager
def checked_charts() -> Iterator[Checked]:
    """Check every figure saved in the block (by file name) just before it is saved; keep a handle to it."""
    checked = Checked()
    original = Figure.savefig

    def savefig(self: Figure, fname: Any, *args: Any, **kwargs: Any) -> Any:
        name = str(getattr(fname, "name", fname)).rsplit("/", 1)[-1]
        checked.charts.append(name)
        checked.problems += [f"{name}: {problem}" for problem in problems(self)]
        checked.figures[name] = self
        return original(self, fname, *args, **kwargs)

    Figure.savefig = savefig  # type: ignore[method-assign]
    try:
        yield checked
    finally:
        Figure.savefig = original  # type: ignore[method-assign]
