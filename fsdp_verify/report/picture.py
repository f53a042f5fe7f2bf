"""Graphviz pictures that explain a case: the original and the rewritten graph side by side, each
bucket's members grouped (around the planned members on the left, around the fused launch on the
right), the plan summary and every finding as text, the nodes a finding names outlined, the first
node whose values diverge marked, and a legend."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from typing import Optional

from torch import fx

from fsdp_verify.checks import CheckContext, Finding
from fsdp_verify.checks.graph_facts import has_effect
from fsdp_verify.graph.ops import target_name
from fsdp_verify.graph.values import SpecError

SHOWN = 160  # a graph larger than this is cut to the neighbourhood of what the finding names
PALETTE = ("#8dd3c7", "#ffffb3", "#bebada", "#80b1d3", "#fdb462", "#b3de69", "#fccde5", "#d9d9d9", "#bc80bd")
MAX_NODES = 600
OFFENDER, DIVERGED = "#e41a1c", "#ff7f00"


class GraphvizMissing(RuntimeError):
    """Graphviz's ``dot`` is not installed."""


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\l") + '"'


def _buckets(ctx: CheckContext) -> list[tuple[str, list[str], Optional[str]]]:
    """(title, original member launches, the rewrite's launch that now delivers them) per bucket:
    the fused launches the rewrite made (found without any plan), then planned buckets it did not make."""
    first = min(ctx.run.originals)
    found: list[tuple[str, list[str], Optional[str]]] = []
    if ctx.run.rewritten:
        members = ctx.refinement(first).members
        for launch, originals in sorted(members.items()):
            names = [str(n.meta.get("param_name", n.name)) for n in originals]
            found.append((f"fused {launch}: {', '.join(names)}", [n.name for n in originals], launch))
    launches = {(n.meta.get("param_name"), n.meta.get("comm_type")): n.name
                for n in ctx.run.originals[first].graph.nodes if n.meta.get("comm_type")}
    fused = {name for _, names, _ in found for name in names}
    for plan in ctx.run.plans.get(first, []):
        for bucket in plan.to_dict()["buckets"]:
            names = [launches.get((m["param_name"], m["kind"])) for m in bucket["members"]]
            names = [n for n in names if n]
            if bucket["fusable"] and names and not set(names) & fused:
                found.append((f"planned {bucket['bucket_id']} (not fused in the rewrite)", names, None))
    return found


def _node(prefix: str, node: fx.Node, colour: Optional[str], marks: set[str], diverged: Optional[str]) -> str:
    try:
        target = target_name(node.target) if node.op == "call_function" else node.op
    except SpecError:  # a target no graph description names (one a target under test inserted)
        target = getattr(node.target, "__name__", str(node.target))
    attrs = [f"label={_quote(node.name + chr(10) + target)}"]
    if colour:
        attrs.append(f"style=filled fillcolor={_quote(colour)}")
    if "c10d" in target:
        attrs.append("shape=box")
    elif has_effect(node):
        attrs.append("shape=octagon")
    if node.name == diverged:
        attrs.append(f'color="{DIVERGED}" penwidth=4 xlabel="first divergence"')
    elif node.name in marks:
        attrs.append(f'color="{OFFENDER}" penwidth=3')
    return f"{_quote(prefix + ':' + node.name)} [{' '.join(attrs)}];"


def _near(launch: fx.Node) -> list[fx.Node]:
    """A fused launch with its copy-ins, its wait and the copy-outs that read the wait."""
    group = [launch, *launch.all_input_nodes]
    for wait in launch.users:
        group.append(wait)
        for user in wait.users:
            group += [user, *user.users] if len(user.users) <= 8 else [user]
    return group


def neighbourhood(module: fx.GraphModule, seeds: set[str], limit: int = SHOWN) -> list[fx.Node]:
    """The nodes of ``module`` nearest ``seeds`` (by data edges, both ways), at most ``limit``, in
    graph order: a large graph stays readable around what a finding names."""
    nodes = list(module.graph.nodes)
    if len(nodes) <= limit:
        return nodes
    by_name = {n.name: n for n in nodes}
    frontier = ([by_name[name] for name in sorted(seeds) if name in by_name] or nodes[:1])[:limit]
    kept: set[fx.Node] = set(frontier)
    while frontier and len(kept) < limit:
        step = []
        for node in frontier:
            for other in (*node.all_input_nodes, *node.users):
                if other not in kept and len(kept) < limit:
                    kept.add(other)
                    step.append(other)
        frontier = step
    return [n for n in nodes if n in kept]


def _seeds(ctx: CheckContext, findings: list[Finding], diverged: Optional[str]) -> set[str]:
    """What a cut picture is centred on: the nodes findings name, the first divergence, else the
    first bucket's members and fused launch."""
    seeds = {name for f in findings for name in f.nodes} | ({diverged} if diverged else set())
    if not seeds:
        buckets = _buckets(ctx)
        if buckets:
            seeds = set(buckets[0][1]) | ({buckets[0][2]} if buckets[0][2] else set())
    return seeds


def shown_nodes(ctx: CheckContext, findings: list[Finding], diverged: Optional[str] = None) -> tuple[int, int]:
    """(nodes drawn, nodes in all) of the first rank's original and rewrite."""
    first = min(ctx.run.originals)
    modules = [ctx.run.originals[first]] + ([ctx.run.rewritten[first]] if ctx.run.rewritten else [])
    seeds = _seeds(ctx, findings, diverged)
    return (sum(len(neighbourhood(m, seeds)) for m in modules), sum(len(m.graph.nodes) for m in modules))


def _cluster(prefix: str, module: fx.GraphModule, groups: list[tuple[str, list[str]]], marks: set[str],
             diverged: Optional[str], seeds: Optional[set[str]] = None) -> list[str]:
    lines = [f"subgraph {_quote('cluster_' + prefix)} {{", f"label={_quote(prefix)};"]
    nodes = neighbourhood(module, seeds or set())[:MAX_NODES]
    shown, placed = set(nodes), set()
    by_name = {n.name: n for n in nodes}
    for index, (title, names) in enumerate(groups):
        colour = PALETTE[index % len(PALETTE)]
        members = [by_name[n] for n in names if n in by_name and n not in placed]
        if not members:
            continue
        lines += [f"subgraph {_quote(f'cluster_{prefix}_bucket_{index}')} {{",
                  f"label={_quote(title)}; style=rounded; color={_quote(colour)}; penwidth=2;"]
        for node in members:
            placed.add(node.name)
            lines.append(_node(prefix, node, colour, marks, diverged))
        lines.append("}")
    lines += [_node(prefix, n, None, marks, diverged) for n in nodes if n.name not in placed]
    lines += [f"{_quote(prefix + ':' + s.name)} -> {_quote(prefix + ':' + n.name)};"
              for n in nodes for s in n.all_input_nodes if s in shown]
    total = len(module.graph.nodes)
    if total > len(nodes):
        lines.append(f"{_quote(prefix + ':more')} [label={_quote(f'... {total - len(nodes)} more nodes not drawn')}];")
    lines.append("}")
    return lines


def plan_lines(ctx: CheckContext) -> list[str]:
    """Each planning round of the first rank, in one line."""
    lines = []
    first = min(ctx.run.originals)
    for index, plan in enumerate(ctx.run.plans.get(first, [])):
        summary = plan.to_dict()["summary"]
        lines.append(f"round {index + 1} plan (rank {first}): {summary.get('buckets')} buckets, "
                     f"{summary.get('candidate_collectives')} candidates of {summary.get('tagged_collectives')} "
                     f"tagged; skips {summary.get('reason_counts', {}).get('skip', {})}; "
                     f"splits {summary.get('reason_counts', {}).get('split', {})}")
    return lines


def _text(ctx: CheckContext, findings: list[Finding], diverged: Optional[str]) -> str:
    """The plan summary and the findings, as the note beside the graphs."""
    lines = plan_lines(ctx)
    first = min(ctx.run.originals)
    if ctx.run.error:
        lines.append(f"target error: {ctx.run.error_type}: {ctx.run.error_message}")
    lines.append("findings:" if findings else "findings: none")
    lines += [f"[{f.checker}]{'' if f.rank is None else f' rank {f.rank}'} {f.message}" for f in findings[:12]]
    if diverged:
        lines.append(f"values first diverge at {diverged} (rank {first})")
    return "\n".join(part for line in lines for part in textwrap.wrap(line, 110, subsequent_indent="    "))


LEGEND = [("collective launch or wait", 'shape=box'), ("effect: storage free, barrier", "shape=octagon"), ("a bucket: its members (left), its fused launch (right)",
          f'style=filled fillcolor="{PALETTE[0]}"'), ("named by a finding", f'color="{OFFENDER}" penwidth=3'),
          ("first node whose values diverge", f'color="{DIVERGED}" penwidth=4')]


def dot_source(ctx: CheckContext, findings: list[Finding], diverged: Optional[str] = None) -> str:
    """DOT text with the first rank's original and rewritten graphs side by side, and the notes."""
    marks = {name for f in findings for name in f.nodes}
    first = min(ctx.run.originals)
    buckets = _buckets(ctx)
    lines = ["digraph fsdp_verify {", "rankdir=TB; compound=true; node [fontsize=10];",
             f"notes [shape=note fontsize=11 label={_quote(_text(ctx, findings, diverged) + chr(10))}];",
             'subgraph cluster_legend { label="legend"; fontsize=11;',
             *(f'legend_{i} [label={_quote(text)} {style}];' for i, (text, style) in enumerate(LEGEND)), "}"]
    seeds = _seeds(ctx, findings, diverged)
    lines += _cluster("original", ctx.run.originals[first], [(t, names) for t, names, _ in buckets], marks, diverged,
                      seeds)
    if ctx.run.rewritten:
        rewritten = ctx.run.rewritten[first]
        by_name = {n.name: n for n in rewritten.graph.nodes}
        groups = [(t, [n.name for n in _near(by_name[launch])]) for t, _, launch in buckets
                  if launch in by_name]
        lines += _cluster("rewritten", rewritten, groups, marks, diverged,
                          seeds | {name for _, names in groups for name in names})
    lines.append("}")
    return "\n".join(lines)


def svg_text(dot: str) -> str:
    """Graphviz's SVG of ``dot``."""
    executable = shutil.which("dot")
    if executable is None:
        raise GraphvizMissing("Graphviz's dot is not installed (apt-get install -y graphviz)")
    return subprocess.run([executable, "-Tsvg"], input=dot.encode(), capture_output=True, check=True,
                          timeout=120).stdout.decode()


def render_svg(dot: str, path: str) -> None:
    """Write the SVG of ``dot`` to ``path`` with Graphviz."""
    svg = svg_text(dot)
    with open(path, "w") as out:
        out.write(svg)
