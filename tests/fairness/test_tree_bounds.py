"""The decisions that bound a subagent tree, over its aggregate's events."""

from __future__ import annotations

import msgspec
import pytest

from agency.contracts.events import AnyEvent, TreeLimits
from agency.domain import tree_bounds
from agency.domain.child_naming import child_run_id
from agency.domain.tree_bounds import TreeBounds
from agency.services.api.blueprint_body import SaveBlueprintBody

ROOT = "th_root"


def _admit(
    history: list[AnyEvent], parent: str, child: str, *, run: str = "run_1", bounds: TreeBounds
) -> str | None:
    view = tree_bounds.fold(ROOT, history)
    events, why = tree_bounds.admit(
        view, parent=parent, child=child, run_id=run, tool_call_id=f"call_{child}", bounds=bounds
    )
    history.extend(events)
    return why


def test_a_chain_stops_at_the_depth_limit_naming_it() -> None:
    history: list[AnyEvent] = []
    bounds = TreeBounds(max_depth=3)
    parent = ROOT
    for depth in range(1, 4):
        assert _admit(history, parent, f"th_{depth}", bounds=bounds) is None
        parent = f"th_{depth}"
    why = _admit(history, parent, "th_4", bounds=bounds)
    assert why is not None and "maxDepth" in why and "is 3" in why and "depth 4" in why


def test_a_thread_has_at_most_max_children_children() -> None:
    history: list[AnyEvent] = []
    bounds = TreeBounds(max_children=2)
    assert _admit(history, ROOT, "th_a", bounds=bounds) is None
    assert _admit(history, ROOT, "th_b", bounds=bounds) is None
    why = _admit(history, ROOT, "th_c", bounds=bounds)
    assert why is not None and "maxChildren" in why and "is 2" in why
    assert _admit(history, "th_a", "th_a1", bounds=bounds) is None  # another parent has room


def test_the_whole_tree_holds_at_most_max_threads_the_root_counted() -> None:
    history: list[AnyEvent] = []
    bounds = TreeBounds(max_threads=3)
    assert _admit(history, ROOT, "th_a", bounds=bounds) is None
    assert _admit(history, "th_a", "th_b", bounds=bounds) is None
    why = _admit(history, "th_b", "th_c", bounds=bounds)
    assert why is not None and "maxThreads" in why and "is 3 threads" in why


def test_an_admission_asked_again_is_the_same_one() -> None:
    history: list[AnyEvent] = []
    bounds = TreeBounds(max_threads=2)
    assert _admit(history, ROOT, "th_a", bounds=bounds) is None
    assert _admit(history, ROOT, "th_a", bounds=bounds) is None
    assert len(history) == 1


def test_a_blueprint_lowers_the_operator_maxima_but_never_raises_them() -> None:
    lowered = TreeBounds().lowered(TreeLimits(max_depth=2, max_threads=500))
    assert lowered == TreeBounds(max_depth=2, max_children=10, max_threads=50)


def test_after_a_terminate_no_spawn_is_admitted_anywhere_below() -> None:
    history: list[AnyEvent] = []
    bounds = TreeBounds()
    assert _admit(history, ROOT, "th_a", bounds=bounds) is None
    history.extend(tree_bounds.stop(tree_bounds.fold(ROOT, history), ROOT, "terminate", ""))
    why = _admit(history, "th_a", "th_b", bounds=bounds, run=child_run_id("th_a"))
    assert why is not None and "terminated" in why
    view = tree_bounds.fold(ROOT, history)
    assert view.stopped_child("th_a") is not None
    assert tree_bounds.stop(view, ROOT, "terminate", "") == ()


def test_a_cancel_refuses_the_runs_under_way_then_but_not_later_ones() -> None:
    history: list[AnyEvent] = []
    bounds = TreeBounds()
    assert _admit(history, ROOT, "th_a", run="run_root", bounds=bounds) is None
    history.extend(tree_bounds.stop(tree_bounds.fold(ROOT, history), ROOT, "cancel", ""))
    # The child's first run and the root's run that spawned before the cancel: stopped.
    assert _admit(history, "th_a", "th_b", run=child_run_id("th_a"), bounds=bounds) is not None
    assert _admit(history, ROOT, "th_c", run="run_root", bounds=bounds) is not None
    # A run of the root started after the cancel spawns again.
    assert _admit(history, ROOT, "th_d", run="run_later", bounds=bounds) is None
    view = tree_bounds.fold(ROOT, history)
    assert view.stopped_child("th_a") is not None and view.stopped_child("th_d") is None
    assert view.below(ROOT) == ["th_a", "th_d"]


@pytest.mark.parametrize(
    ("limits", "problem"),
    [
        ({"maxDepth": 0}, "Expected `int` >= 1 - at `$.limits.maxDepth`"),
        ({"maxThreads": -3}, "Expected `int` >= 1 - at `$.limits.maxThreads`"),
        ({"max_children": 2}, "Object contains unknown field `max_children` - at `$.limits`"),
    ],
    ids=["zero-depth", "negative-size", "snake-case-over-http"],
)
def test_a_blueprint_body_with_limits_that_bound_nothing_is_refused(
    limits: dict[str, int], problem: str
) -> None:
    raw = msgspec.json.encode({"name": "x", "limits": limits})
    with pytest.raises(msgspec.ValidationError) as refused:
        msgspec.json.decode(raw, type=SaveBlueprintBody)
    assert str(refused.value) == problem


def test_limits_are_camel_case_over_http_and_snake_case_where_stored() -> None:
    raw = b'{"name": "x", "limits": {"maxDepth": 2, "maxThreads": 7}}'
    spec = msgspec.json.decode(raw, type=SaveBlueprintBody).spec()
    assert spec.limits == TreeLimits(max_depth=2, max_threads=7)
    assert msgspec.json.decode(msgspec.json.encode(spec))["limits"] == {
        "max_depth": 2,
        "max_threads": 7,
    }
