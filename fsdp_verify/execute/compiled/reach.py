"""What ``fsdp-verify endtoend`` draws, counted without compiling: each model dimension and each
configuration value a run would judge, so ``fsdp-verify coverage --endtoend`` can name one that a
run of that size never reaches (compile cache cold and warm, dynamic sizes, data-dependent rows,
uneven shards, meshes, mixed precision, and every option of inductor's space)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import hypothesis
from hypothesis import HealthCheck, Phase, given, settings

from fsdp_verify.capture.model import ModelDesc, param_shapes
from fsdp_verify.coverage.reasons import option_key
from fsdp_verify.execute.compiled.sweep import E2E_MESHES, RANK_MESHES, planned_configurations
from fsdp_verify.strategies.captured import model_descs

# The model dimensions a bug class hides in, each counted per drawn model.
MODEL_FEATURES = ("uneven_shards", "data_dependent", "tokens", "tied_weights", "checkpointed", "norms",
                  "bf16_params", "bf16_reductions", "sharded_on_both_dims")


def _degree(desc: ModelDesc, fqn: str) -> int:
    """Ranks that split ``fqn``'s first dimension: the mesh's last dim (1-D, or HSDP's replicas), or
    both dims for a layer sharded on both (``shard2d``: ``[Shard(0), Shard(0)]``)."""
    layer = desc.layers[int(fqn.split(".")[1])]
    if len(desc.mesh) > 1 and layer.placement == "shard2d":
        return desc.mesh[0] * desc.mesh[1]
    return desc.mesh[-1]


def model_features(desc: ModelDesc) -> Counter:
    """The MODEL_FEATURES ``desc`` has."""
    shapes = param_shapes(desc)
    has = {"uneven_shards": any(shape[0] % _degree(desc, fqn) for fqn, shape in shapes.items()),
           "data_dependent": desc.data_dependent, "tokens": desc.tokens,
           "tied_weights": any(layer.tie >= 0 for layer in desc.layers),
           "checkpointed": any(layer.checkpoint for layer in desc.layers),
           "norms": any(layer.kind == "norm" for layer in desc.layers),
           "bf16_params": desc.param_dtype == "bfloat16", "bf16_reductions": desc.reduce_dtype == "bfloat16",
           "sharded_on_both_dims": len(desc.mesh) > 1 and any(l.placement == "shard2d" for l in desc.layers)}
    return Counter(name for name in MODEL_FEATURES if has[name])


@dataclass
class ModelReach:
    """What ``models`` drawn models and ``configs`` planned configurations reach."""

    models: int = 0
    meshes: Counter = field(default_factory=Counter)  # mesh -> models
    expected_meshes: tuple[tuple[int, ...], ...] = ()
    features: Counter = field(default_factory=Counter)  # MODEL_FEATURES -> models
    configurations: int = 0
    values: Counter = field(default_factory=Counter)  # "option=value" -> planned configurations
    space: tuple[str, ...] = ()


def _space() -> tuple[str, ...]:
    """Every ``option=value`` an end-to-end configuration may take."""
    from fsdp_verify.execute.compiled.drawn import COMPILE_SPACE
    from fsdp_verify.targets.inductor import CONFIG_SPACE
    return tuple(option_key(name, value) for name, values in {**CONFIG_SPACE, **COMPILE_SPACE}.items()
                 for value in values)


def undrawn_values(configs: list[dict[str, Any]]) -> list[str]:
    """The ``option=value`` pairs of the space that none of ``configs`` takes."""
    taken = {option_key(name, value) for config in configs for name, value in config.items()}
    return [key for key in _space() if key not in taken]


def measure_models(models: int, configs: int, seed: int = 0, ranks: bool = True) -> ModelReach:
    """Draw ``models`` model descriptions as ``endtoend`` draws them (``ranks``: the real-rank meshes)
    and plan ``configs`` configurations; nothing is compiled."""
    meshes = RANK_MESHES if ranks else E2E_MESHES
    reach = ModelReach(expected_meshes=meshes, space=_space())
    chosen = planned_configurations(configs)
    reach.configurations = len(chosen)
    reach.values.update(option_key(name, value) for config in chosen for name, value in config.items())

    @settings(max_examples=models, database=None, deadline=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.generate])
    @hypothesis.seed(seed)
    @given(model_descs(max_layers=3, meshes=meshes, min_layers=2, selects=True))
    def collect(desc: ModelDesc) -> None:
        reach.models += 1
        reach.meshes[desc.mesh] += 1
        reach.features.update(model_features(desc))

    collect()
    return reach


def unreached_models(reach: ModelReach) -> list[str]:
    """Meshes, model features and configuration values never reached."""
    return ([f"mesh={'x'.join(map(str, mesh))}" for mesh in reach.expected_meshes if not reach.meshes[mesh]]
            + [name for name in MODEL_FEATURES if not reach.features[name]]
            + [f"option {key}" for key in reach.space if not reach.values[key]])


def format_models(reach: ModelReach) -> str:
    """The counts, then what was missed."""
    missing = unreached_models(reach)
    lines = [f"models {reach.models}, planned configurations {reach.configurations}",
             "meshes: " + ", ".join(f"{'x'.join(map(str, mesh))}={reach.meshes[mesh]}" for mesh in reach.expected_meshes),
             "model features: " + ", ".join(f"{name}={reach.features[name]}" for name in MODEL_FEATURES),
             f"configuration values: {sum(bool(reach.values[k]) for k in reach.space)} of {len(reach.space)} drawn: "
             + ", ".join(f"{key} {reach.values[key]}" for key in reach.space),
             f"unreached: {', '.join(missing)}" if missing else "unreached: none"]
    return "\n".join(lines)


__all__ = ["MODEL_FEATURES", "ModelReach", "format_models", "measure_models", "model_features", "undrawn_values",
           "unreached_models"]
