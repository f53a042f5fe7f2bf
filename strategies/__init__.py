"""Hypothesis strategies for FSDP-tagged graphs (the generate stage of the pipeline).

- ``fsdp_graphs``: valid graphs shaped like the FSDP pass's output, with plan arguments;
- ``mutated_graphs``: a valid graph with one targeted defect (each skip/split reason, bad args);
- ``graphs_from_modules``: real small ``nn.Module``s traced to joint graphs, then FSDP-tagged;
- ``hazard_graphs``: several planted hazards at once (more chances per example);
- ``cases``: what a fuzz campaign draws from;
- ``spec_settings``: the spec's [I] settings, pinned or drawn per example;
- ``with_target_options``: a target's open options, drawn per case.
"""

from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
from fsdp_verify.strategies.graphs import SIZES, Size, blueprints, cases, fsdp_graphs, hazard_graphs, mutated_graphs, plan_args

__all__ = ["SIZES", "Blueprint", "ParamDraw", "Size", "blueprints", "cases", "fsdp_graphs", "hazard_graphs",
           "mutated_graphs", "plan_args", "render"]

from fsdp_verify.strategies.modules import MODELS, fsdp_module_graph, graphs_from_modules  # noqa: E402

__all__ += ["MODELS", "fsdp_module_graph", "graphs_from_modules"]

from fsdp_verify.strategies.spec_settings import spec_settings  # noqa: E402

__all__ += ["spec_settings"]

from fsdp_verify.strategies.target_options import with_target_options  # noqa: E402

__all__ += ["with_target_options"]

from fsdp_verify.strategies.captured import captured_graphs, model_descs  # noqa: E402

__all__ += ["captured_graphs", "model_descs"]
