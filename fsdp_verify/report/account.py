"""A readable account of one case: its plan, the graph around each bucket, and the findings."""

from __future__ import annotations

from torch import fx

from fsdp_verify.checks import CheckContext, Finding

CONTEXT = 2  # nodes shown on either side of a bucket's window


def _line(index: int, node: fx.Node, marks: set[str]) -> str:
    args = ", ".join(a.name if isinstance(a, fx.Node) else repr(a) for a in node.args)
    tag = node.meta.get("comm_type", "")
    phase = "bw" if node.meta.get("autograd_backward") else "  "
    flag = "!!" if node.name in marks else "  "
    return f"{flag} {index:>4} {phase} {node.name} = {node.target if node.op == 'call_function' else node.op}" \
           f"({args}){'  # ' + tag if tag else ''}"


def account(ctx: CheckContext, findings: list[Finding]) -> str:
    """The text ``fsdp-verify show`` prints."""
    case, run = ctx.case, ctx.run
    marks = {name for f in findings for name in f.nodes}
    lines = [f"case: {case.label or '(unlabelled)'}; ranks {list(case.graph.world())}; groups "
             f"{ {k: [list(p) for p in v] for k, v in case.graph.groups.items()} }; "
             f"{len(case.graph.nodes)} nodes; seed {case.seed}",
             f"planner arguments: {case.plan_args}"]
    if run.error:
        lines += ["", f"target error ({run.error_type}): {run.error_message}"]
    first = min(run.originals)
    nodes = list(run.originals[first].graph.nodes)
    for round_index, plan in enumerate(run.plans.get(first, [])):
        report = plan.to_dict()
        lines += ["", f"round {round_index + 1} plan (rank {first}): {report['summary']}"]
        for decision in report["decisions"]:
            lines.append(f"  decision {decision}")
        for bucket in report["buckets"]:
            members = ", ".join(f"{m['param_name']}@{m['local_offset']}+{m['local_numel']}" for m in bucket["members"])
            lines.append(f"  {bucket['bucket_id']} {bucket['members'][0]['kind']} [{members}] "
                         f"window ({bucket['latest_input']}, {bucket['earliest_consumer']}) {bucket['size_bytes']} B")
            if round_index == 0 and bucket["fusable"]:
                low = max(0, bucket["latest_input"] - CONTEXT)
                high = min(len(nodes), bucket["earliest_consumer"] + CONTEXT + 1)
                lines += [f"    {_line(i, nodes[i], marks)}" for i in range(low, high)]
    lines += ["", "findings:" if findings else "findings: none"]
    for finding in findings:
        where = f" (rank {finding.rank})" if finding.rank is not None else ""
        lines.append(f"  [{finding.checker}]{where} {finding.message}")
    shown = {key: value for key, value in ctx.metrics.items() if key != "cpu"}  # timings: no verdict
    if shown:
        lines += ["", f"metrics: {shown}"]
    return "\n".join(lines)
