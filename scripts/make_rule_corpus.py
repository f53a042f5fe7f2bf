"""Write the hand-made regression cases of corpus/rules/: one small case per spec rule.

Each case is a two-block graph with one targeted defect (every skip reason, every reachable
split reason, ``oversized``, every bad-argument error) or a traced model, judged against the
reference target. Each file also states the decision the spec demands, by construction of the
defect and not by asking any planner: the broken launch's skip reason, the split between the
pair, the oversized launch, the refusal message, or (valid case) which launches share a bucket.
Run from the repository root: ``python scripts/make_rule_corpus.py``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from fsdp_verify.corpus import files as corpus
from fsdp_verify.model.case import Case
from fsdp_verify.checks import ERROR
from fsdp_verify.checks.planner_oracle import expected_argument_error
from fsdp_verify.corpus.expectations import check_expected
from fsdp_verify.engine.run_case import check_all
from fsdp_verify.targets import get_target
from fsdp_verify.strategies import fsdp_module_graph, mutations
from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render

FOLDER = "corpus/rules"


def base() -> Case:
    blocks = ((ParamDraw((2, 4), view="t"), ParamDraw((3,), view="flat")),
              (ParamDraw((2, 2), "bfloat16", view="split", reduce_op="sum"),
               ParamDraw((1, 6), "bfloat16", view="chain", reduce_op="sum")))
    return Case(render(Blueprint(blocks=blocks, degree=4)), seed=7)


def _valid_buckets(case: Case) -> dict:
    """The base case by construction: each block's two parameters share one bucket per kind."""
    launches = mutations.launches(case.graph)
    together = []
    for kind in ("fsdp_all_gather", "fsdp_all_gather_backward", "fsdp_reduce_scatter"):
        for block in (0, 1):
            together.append(sorted(n for n in launches if case.graph.node(n).meta["comm_type"] == kind
                                   and case.graph.node(n).meta["param_name"].startswith(f"blocks.{block}.")))
    return {"together": together}


def rule_cases() -> list[tuple[Case, Optional[dict]]]:
    """Each rule case with the spec's expected decision (None for traced models)."""
    case = base()
    ag = next(n for n in mutations.launches(case.graph) if case.graph.node(n).meta["comm_type"] == "fsdp_all_gather")
    rs = next(n for n in mutations.launches(case.graph)
              if case.graph.node(n).meta["comm_type"] == "fsdp_reduce_scatter")
    out = [(replace(case, label="rule:valid"), _valid_buckets(case))]
    for reason, variants in sorted(mutations.SKIP_MUTATIONS.items()):
        for variant in variants:
            site = ag if mutations.fits(variant, case, ag) else rs  # some defects exist for one kind only
            broken = variant(case, site)
            added = sorted(set(mutations.launches(broken.graph)) - set(mutations.launches(case.graph)))
            out.append((replace(broken, label=f"rule:skip:{reason}:{variant.__name__}"),
                        {"skips": {added[0] if added else site: reason}}))
    pairs = mutations.sibling_pairs(case.graph)
    for table in (mutations.SPLIT_MUTATIONS, mutations.SINGLETON_MUTATIONS):
        for reason, variants in sorted(table.items()):
            for variant in variants:
                a, b = next(p for p in pairs if mutations.fits(variant, case, p))
                expected = {"singletons": [b]} if reason == "oversized" else \
                    {"splits": [{"node": b, "previous_node": a, "reason": reason}]}
                out.append((replace(variant(case, a, b), label=f"rule:split:{reason}:{variant.__name__}"), expected))
    for name, args in sorted(mutations.ARG_MUTATIONS.items()):
        broken = replace(case.with_args(**args), label=f"rule:args:{name}")
        out.append((broken, {"error": expected_argument_error(broken.plan_args, broken.group_ranks(0))}))
    for kind in ("mlp", "tied_lm"):
        out.append((replace(fsdp_module_graph(kind, degree=2), seed=3), None))
    return out


def main() -> None:
    target = get_target("reference")
    for case, expected in rule_cases():
        findings, _ = check_all(target, case)
        entry = corpus.Entry(case, target.name, corpus.Verdict.of([f for f in findings if f.severity == ERROR]),
                             corpus.provenance(None, label=case.label, source="scripts/make_rule_corpus.py"), expected)
        missed = check_expected(target, entry)
        if missed:
            raise SystemExit(f"{case.label}: the reference does not make the spec's decision: {missed[0].message}")
        path, written = corpus.save(entry, FOLDER, refresh=True)
        print(f"{'wrote' if written else 'kept '} {path} {case.label} {entry.verdict.status}")


if __name__ == "__main__":
    main()
