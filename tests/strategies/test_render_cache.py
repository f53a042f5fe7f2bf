"""A rendered blueprint is one GraphSpec shared by every case drawn from it: sound only while
nothing that draws, plants, normalises or judges a case edits the graph it was given."""

from __future__ import annotations

from unittest import mock

from hypothesis import given, settings, strategies as st

from fsdp_verify.corpus.profiles import SLOW_OK
from fsdp_verify.engine.run_case import check_all
from fsdp_verify.strategies import blueprint, cases, graphs, hazard_graphs
from fsdp_verify.targets import get_target


@settings(max_examples=12, deadline=None, suppress_health_check=SLOW_OK, database=None)
@given(data=st.data())
def test_a_shared_render_is_left_as_rendered_by_drawing_planting_and_judging(data):
    rendered: list[tuple] = []

    def spy(bp):
        graph = blueprint.render(bp)
        rendered.append((bp, graph, graph.dumps()))
        return graph

    with mock.patch.object(graphs, "render", spy):
        case = data.draw(st.one_of(cases("tiny"), hazard_graphs("tiny", max_hazards=3)))
        again = data.draw(cases("tiny"))
    for drawn in (case, again):
        for target in ("reference", "mutant:members_unsorted"):
            check_all(get_target(target), drawn)
    assert rendered
    for bp, graph, text in rendered:
        assert blueprint.render(bp) is graph  # shared, not copied
        assert graph.dumps() == text == blueprint.fresh_render(bp).dumps()
