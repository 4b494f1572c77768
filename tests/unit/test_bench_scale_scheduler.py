"""The benchmark's schedulers (:func:`bench.scale.schedulers.make_scheduler`)
take the options they are given: ``--placement-view-seconds`` reaches the
view (which reads it once, when the scheduler is made; set after, it was
ignored and every run kept Placement's answers 60 s, whatever was asked)."""

from __future__ import annotations

from bench.scale import schedulers


def test_the_view_seconds_and_answer_timeout_asked_are_the_schedulers():
    made = schedulers.make_scheduler(None, None, 12.5, view_seconds=1800.0)  # type: ignore[arg-type]
    assert made.view.seconds == 1800.0
    assert made.conf.scheduler.answer_timeout == 12.5
    default = schedulers.make_scheduler(None, None, 30.0)  # type: ignore[arg-type]
    assert default.view.seconds == default.conf.scheduler.placement_view_seconds == 60.0
