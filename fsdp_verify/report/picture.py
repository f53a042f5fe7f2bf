"""Graphviz pictures of the original and the rewritten graph: buckets coloured, offenders marked."""

from __future__ import annotations

import shutil
import subprocess

from torch import fx

from ..checks import CheckContext, Finding

PALETTE = ("#8dd3c7", "#ffffb3", "#bebada", "#80b1d3", "#fdb462", "#b3de69", "#fccde5", "#d9d9d9", "#bc80bd")
MAX_NODES = 600


class GraphvizMissing(RuntimeError):
    """Graphviz's ``dot`` is not installed."""


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _colours(ctx: CheckContext) -> dict[str, str]:
    """Original launch names and fused launch names -> the colour of their bucket."""
    colours: dict[str, str] = {}
    first = min(ctx.run.originals)
    reports = [plan.to_dict() for plan in ctx.run.plans.get(first, [])]
    buckets = [(r, b) for r in reports for b in r["buckets"] if b["fusable"]]
    launches = {(n.meta.get("param_name"), n.meta.get("comm_type")): n.name
                for n in ctx.run.originals[first].graph.nodes if n.meta.get("comm_type")}
    for index, (_, bucket) in enumerate(buckets):
        colour = PALETTE[index % len(PALETTE)]
        for member in bucket["members"]:
            name = launches.get((member["param_name"], member["kind"]))
            if name:
                colours.setdefault(name, colour)
        colours.setdefault(f"bucket:{bucket['bucket_id']}", colour)
    return colours


def _cluster(name: str, module: fx.GraphModule, colours: dict[str, str], marks: set[str]) -> list[str]:
    lines = [f"subgraph {_quote('cluster_' + name)} {{", f"label={_quote(name)};"]
    nodes = list(module.graph.nodes)
    shown = set(nodes[:MAX_NODES])
    for node in nodes[:MAX_NODES]:
        colour = colours.get(node.name) or colours.get(f"bucket:{node.meta.get('fsdp_bucket_id')}")
        attrs = [f"label={_quote(node.name + chr(10) + str(node.target if node.op == 'call_function' else node.op))}"]
        if colour:
            attrs.append(f"style=filled fillcolor={_quote(colour)}")
        if node.meta.get("comm_type"):
            attrs.append("shape=box")
        if node.name in marks:
            attrs.append('color="red" penwidth=3')
        lines.append(f"{_quote(name + ':' + node.name)} [{' '.join(attrs)}];")
    for node in nodes[:MAX_NODES]:
        for source in node.all_input_nodes:
            if source in shown:
                lines.append(f"{_quote(name + ':' + source.name)} -> {_quote(name + ':' + node.name)};")
    if len(nodes) > MAX_NODES:
        lines.append(f"{_quote(name + ':more')} [label={_quote(f'... {len(nodes) - MAX_NODES} more nodes')}];")
    lines.append("}")
    return lines


def dot_source(ctx: CheckContext, findings: list[Finding]) -> str:
    """DOT text with the original and rewritten graphs of the first rank side by side."""
    marks = {name for f in findings for name in f.nodes}
    colours = _colours(ctx)
    first = min(ctx.run.originals)
    lines = ["digraph fsdp_verify {", "rankdir=TB; node [fontsize=10];"]
    lines += _cluster("original", ctx.run.originals[first], colours, marks)
    if ctx.run.rewritten:
        lines += _cluster("rewritten", ctx.run.rewritten[first], colours, marks)
    lines.append("}")
    return "\n".join(lines)


def render_svg(dot: str, path: str) -> None:
    """Write the SVG of ``dot`` to ``path`` with Graphviz."""
    executable = shutil.which("dot")
    if executable is None:
        raise GraphvizMissing("Graphviz's dot is not installed (apt-get install -y graphviz)")
    subprocess.run([executable, "-Tsvg", "-o", path], input=dot.encode(), check=True, timeout=120)
