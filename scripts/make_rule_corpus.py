"""Write the hand-made regression cases of corpus/rules/: one small case per spec rule.

Each case is a two-block graph with one targeted defect (every skip reason, every reachable
split reason, ``oversized``, every bad-argument error) or a traced model, judged against the
reference target. Run from the repository root: ``python scripts/make_rule_corpus.py``.
"""

from __future__ import annotations

from dataclasses import replace

from fsdp_verify import corpus
from fsdp_verify.case import Case
from fsdp_verify.checks import ERROR
from fsdp_verify.orchestrate import check_all
from fsdp_verify.targets import get_target
from fsdp_verify.strategies import fsdp_module_graph, mutations
from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render

FOLDER = "corpus/rules"


def base() -> Case:
    blocks = ((ParamDraw((2, 4), view="t"), ParamDraw((3,), view="flat")),
              (ParamDraw((2, 2), "bfloat16", view="split", reduce_op="sum"),
               ParamDraw((1, 6), "bfloat16", view="chain", reduce_op="sum")))
    return Case(render(Blueprint(blocks=blocks, degree=4)), seed=7)


def rule_cases() -> list[Case]:
    case = base()
    ag = next(n for n in mutations.launches(case.graph) if case.graph.node(n).meta["comm_type"] == "fsdp_all_gather")
    rs = next(n for n in mutations.launches(case.graph)
              if case.graph.node(n).meta["comm_type"] == "fsdp_reduce_scatter")
    out = [replace(case, label="rule:valid")]
    for reason, variants in sorted(mutations.SKIP_MUTATIONS.items()):
        for variant in variants:
            site = rs if variant in mutations.RS_ONLY else ag
            out.append(replace(variant(case, site), label=f"rule:skip:{reason}:{variant.__name__}"))
    pairs = mutations.sibling_pairs(case.graph)
    for table in (mutations.SPLIT_MUTATIONS, mutations.SINGLETON_MUTATIONS):
        for reason, variants in sorted(table.items()):
            for variant in variants:
                pair = next(p for p in pairs if mutations.fits(variant, case, p))
                out.append(replace(variant(case, *pair), label=f"rule:split:{reason}:{variant.__name__}"))
    for name, args in sorted(mutations.ARG_MUTATIONS.items()):
        out.append(replace(case.with_args(**args), label=f"rule:args:{name}"))
    for kind in ("mlp", "tied_lm"):
        out.append(replace(fsdp_module_graph(kind, degree=2), seed=3))
    return out


def main() -> None:
    target = get_target("reference")
    for case in rule_cases():
        findings, _ = check_all(target, case)
        entry = corpus.Entry(case, target.name, corpus.Verdict.of([f for f in findings if f.severity == ERROR]),
                             corpus.provenance(None, label=case.label, source="scripts/make_rule_corpus.py"))
        path, written = corpus.save(entry, FOLDER)
        print(f"{'wrote' if written else 'kept '} {path} {case.label} {entry.verdict.status}")


if __name__ == "__main__":
    main()
