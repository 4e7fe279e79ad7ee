"""Labels of the figures: the Pareto plot's labels stay clear of each other, of the points and of the whiskers
on a crowded cluster (the ml-100k headline's, where they overlapped), and line-end labels stack without
overlapping, each level with its line or pushed just clear of its neighbours."""

import itertools

import matplotlib.pyplot as plt
import pytest
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from prism_rec.tracking import plots

# tokens/s, mean AUC, std: the prism cluster of results/ml-100k/pareto.png (before labels were placed)
CROWDED = {"prism": (3.8e5, 0.8711, 0.0030), "prism-L0": (3.6e5, 0.8720, 0.0035),
           "prism-noconv": (3.7e5, 0.8719, 0.0030),
           "gated_deltanet": (4.3e5, 0.8720, 0.0040), "prism-nogain": (4.1e5, 0.8712, 0.0012),
           "prism-nogelu": (3.6e5, 0.8690, 0.0031), "prism-eq18": (3.6e5, 0.8737, 0.0025),
           "sasrec": (4.3e5, 0.8767, 0.0020), "transformer++": (3.95e5, 0.8797, 0.0022),
           "mamba2": (7.4e5, 0.8688, 0.0031), "hstu": (1.1e6, 0.8639, 0.0001), "titans": (9.5e4, 0.8587, 0.0016)}


def text_boxes(axes) -> list[Bbox]:
    renderer = axes.figure.canvas.get_renderer()
    return [Text.get_window_extent(text, renderer) for text in axes.texts]


def test_pareto_labels_overlap_neither_each_other_nor_points_nor_whiskers(tmp_path, monkeypatch):
    drawn = {}
    monkeypatch.setattr(plots, "save_figure", lambda figure, path: drawn.setdefault("figure", figure))
    plots.pareto_chart(CROWDED, ["transformer++", "sasrec", "mamba2", "hstu"], 0.7241, "toy", "caption",
                       tmp_path / "pareto.png")
    axes = drawn["figure"].axes[0]
    drawn["figure"].draw_without_rendering()  # as saving draws it
    labels = {text.get_text(): text for text in axes.texts if text.get_text() in CROWDED}
    assert sorted(labels) == sorted(CROWDED)  # one label per model
    renderer = drawn["figure"].canvas.get_renderer()
    boxes = {name: Text.get_window_extent(text, renderer) for name, text in labels.items()}
    inside = axes.get_window_extent(renderer)
    for (a, box_a), (b, box_b) in itertools.combinations(boxes.items(), 2):
        assert not box_a.overlaps(box_b), f"labels {a} and {b} overlap"
    for name, box in boxes.items():
        assert inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1, name
        for speed, mean, std in CROWDED.values():  # no label over a point or its whisker
            (x, low), (_, high) = axes.transData.transform([(speed, mean - std), (speed, mean + std)])
            assert not box.overlaps(Bbox.from_extents(x - 2, low, x + 2, high)), name
    low, high = axes.get_ylim()
    assert low > 0.85 and high < 0.885  # zoomed to the points; the pop floor is a note
    assert any("pop (floor) 0.7241, below the axis" in text.get_text() for text in axes.texts)
    plt.close(drawn["figure"])


def test_line_end_labels_stack_clear_of_each_other_level_with_their_lines():
    figure, axes = plt.subplots(figsize=(4, 3), layout="constrained")
    ends = [(f"line {index}", 10.0, value, "tab:blue") for index, value in enumerate([1.0, 1.01, 1.02, 1.5, 3.0])]
    for _, x, y, _ in ends:
        axes.plot([1, x], [y, y])
    limits = axes.get_ylim()
    labels = plots.label_line_ends(axes, ends, fontsize=7)
    figure.draw_without_rendering()
    boxes = text_boxes(axes)
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b)
    levels = [label.xyann[1] for label in labels]
    assert levels == sorted(levels)  # the order of the lines kept
    assert levels[-1] == pytest.approx(3.0, rel=0.02) and levels[-2] == pytest.approx(1.5, rel=0.02)  # free: level
    assert all(box.x0 >= axes.get_window_extent().x1 for box in boxes)  # right of the axes
    assert axes.get_ylim() == limits  # the labels do not move the axis
    plt.close(figure)
