"""A case's repr is one short line: Hypothesis prints it for a failing example and warns past 10 kB."""

from dataclasses import replace

from helpers.cases import two_block_case


def test_a_case_repr_is_short_and_names_what_identifies_it():
    case = replace(two_block_case(), label="mutated:drop_wait", seed=7,
                   target_options=(("bucket_all_gathers_fx", "all"), ("bucket_cap_mb", None)))
    text = repr(case)
    assert text == "Case('mutated:drop_wait', 88 nodes, 4 parameters, seed=7, 2 target options)"
    assert len(repr(replace(case, graph=case.graph.with_nodes(list(case.graph.nodes) * 50)))) < 200


def test_hypothesis_prints_a_case_as_its_short_repr():
    from hypothesis.vendor.pretty import pretty
    case = two_block_case()
    assert pretty(case) == repr(case)
