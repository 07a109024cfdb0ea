"""The two plots that misled: a series logged once is not drawn as a lone dot, and the clock gap histogram
resolves the 1-9 minute near misses."""

from __future__ import annotations

from vlm_smmd.analysis import plots


def test_a_series_logged_once_is_said_not_drawn(tmp_path, monkeypatch):
    history = [{"step": s, "loss": 2.0 / s} for s in (1, 2, 3)] + [{"step": 3, "eval_loss": 0.75}]
    texts, drawn = [], []
    real_plot = plots.new_figure

    def spy(*args, **kwargs):
        fig, axes = real_plot(*args, **kwargs)
        real_text = fig.text
        fig.text = lambda *a, **k: texts.append(a[2]) or real_text(*a, **k)
        for ax in axes if isinstance(axes, list) else [axes]:
            ax.plot = lambda xs, ys, *a, ax=ax, **k: drawn.append(list(xs)) or type(ax).plot(ax, xs, ys, *a, **k)
        return fig, axes

    monkeypatch.setattr(plots, "new_figure", spy)
    assert plots.training_curve(history, {}, "run", tmp_path / "curve.png")
    assert drawn == [[1, 2, 3]]  # the training loss only: no panel for the one evaluation
    assert "logged once: eval_loss 0.75 at step 3" in texts
    assert not plots.training_curve([{"step": 1, "eval_loss": 0.5}], {}, "run", tmp_path / "none.png")


def test_gap_bins_are_one_minute_up_to_ten():
    edges = [*range(0, 10), *range(10, 370, 10)]
    assert [plots._bin_of(edges, g) for g in (0, 0.5, 1, 3, 9.9, 10, 19, 359, 360)] == [0, 0, 1, 3, 9, 10, 10, 44, 45]


def test_clock_gap_histogram_separates_near_misses(tmp_path, monkeypatch):
    from vlm_smmd.analysis import analyze_records, write_report

    records = [{"id": str(i), "source": "clocks", "question": "time?", "prediction": p, "target": "3:20"}
               for i, p in enumerate(["3:20"] * 6 + ["3:21", "3:23", "3:27", "5:40"])]
    analysis = analyze_records(records)
    assert sorted(analysis["clock"]["gaps"]) == [0, 0, 0, 0, 0, 0, 1, 3, 7, 140]
    stairs, real = [], plots.new_figure

    def spy(*args, **kwargs):
        fig, axes = real(*args, **kwargs)
        for ax in axes if isinstance(axes, list) else [axes]:
            ax.stairs = lambda values, edges, *a, ax=ax, **k: (stairs.append((k.get("label"), list(values), list(edges)))
                                                              or type(ax).stairs(ax, values, edges, *a, **k))
        return fig, axes

    monkeypatch.setattr(plots, "new_figure", spy)
    write_report({"run": analysis}, tmp_path / "report")
    assert (tmp_path / "report" / "clock_gap_hist.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (values, edges), = [(v, e) for label, v, e in stairs if label == "run"]
    assert edges[:12] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20] and edges[-1] == 360
    assert values[:10] == [0.6, 0.1, 0, 0.1, 0, 0, 0, 0.1, 0, 0]  # per minute: the near misses each in their own bin
    assert values[23] * 10 == 0.1  # the 140-minute answer, in the 10-minute bin 140-150


def test_a_long_logged_once_caption_stays_inside_the_figure_and_clear_of_the_axis_label(tmp_path, monkeypatch):
    """The demo's four evaluation figures wrap to two lines; drawn with fig.text they overlapped "step"."""
    history = [{"step": s, "loss": 2.0 / s} for s in (1, 2, 3)] + [
        {"step": 1000, f"eval_{k}": 0.4812} for k in ("aux", "ce", "loss", "total", "runtime")]
    figures = []
    real_plot = plots.new_figure
    monkeypatch.setattr(plots, "new_figure", lambda *a, **k: figures.append(real_plot(*a, **k)) or figures[-1])
    assert plots.training_curve(history, {}, "run", tmp_path / "curve.png")
    fig, axes = figures[0]
    renderer = fig.canvas.get_renderer()
    caption = fig._supxlabel.get_window_extent(renderer)
    frame = fig.bbox
    assert "\n" in fig._supxlabel.get_text()
    assert frame.x0 <= caption.x0 and caption.x1 <= frame.x1 and frame.y0 <= caption.y0
    for ax in axes if isinstance(axes, list) else [axes]:
        assert caption.y1 <= ax.xaxis.label.get_window_extent(renderer).y0
