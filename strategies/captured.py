"""Real training steps as cases: Hypothesis draws a model description, the model is built
SimpleFSDP-style on a fake process group, its forward and backward graphs are captured through
``torch.compile`` (aot_autograd) and one of them becomes the case.

These are the graphs inductor's bucketing is written for. Shrinking shrinks the description
(fewer layers, plainer kinds, even widths, no mixed precision, a 1-D mesh), never the graph, so a
shrunk failure is still a real compile's output. Captures are cached per description.
"""

from __future__ import annotations

from hypothesis import strategies as st

from fsdp_verify.capture import PHASES, Layer, ModelDesc, capture
from fsdp_verify.capture.model import FLOAT_DTYPES, MESHES, PLACEMENTS, weight_shape
from fsdp_verify.model.case import Case

WIDTHS = (8, 4, 6, 10, 3)  # shrinks towards 8: even over every mesh; 6, 10 and 3 shard unevenly over 4


@st.composite
def model_descs(draw, max_layers: int = 4, meshes: tuple[tuple[int, ...], ...] = MESHES,
                min_layers: int = 1, selects: bool = False) -> ModelDesc:
    """A model: embedding or not, then linears and norms (tied weights, checkpointed layers, per-layer
    2-D placements), a mesh, and mixed-precision dtypes. With ``selects``, a layer may first keep only
    some rows (data-dependent sizes: for compiled runs only, the captured graph format is static)."""
    mesh = draw(st.sampled_from(meshes))
    in_width = draw(st.sampled_from(WIDTHS[:3]))
    layers: list[Layer] = []
    if draw(st.booleans()):
        layers.append(Layer("embed", in_width, bias=False, checkpoint=draw(st.booleans())))
    width = in_width
    for _ in range(draw(st.integers(min_layers, max(min_layers, max_layers)))):
        kind = draw(st.sampled_from(("linear", "norm")))
        placement = draw(st.sampled_from(PLACEMENTS)) if len(mesh) == 2 else "shard"
        layer = Layer(kind, draw(st.sampled_from(WIDTHS)), bias=draw(st.booleans()),
                      checkpoint=draw(st.booleans()), placement=placement,
                      select=selects and draw(st.integers(0, 3)) == 3)
        if kind == "linear":
            partial = ModelDesc((*layers, layer), in_width, mesh)
            ties = [i for i, earlier in enumerate(layers) if earlier.kind != "norm" and earlier.tie < 0
                    and weight_shape(partial, i)[1] == width]
            if ties and draw(st.booleans()):
                tie = draw(st.sampled_from(ties))
                layer = Layer(kind, weight_shape(partial, tie)[0], layer.bias, tie, layer.checkpoint, placement,
                              layer.select)
        layers.append(layer)
        width = width if kind == "norm" else layer.width
    return ModelDesc(tuple(layers), in_width, mesh, draw(st.sampled_from(FLOAT_DTYPES)),
                     draw(st.sampled_from(FLOAT_DTYPES)), draw(st.integers(1, 3)))


@st.composite
def captured_graphs(draw, phases: tuple[str, ...] = PHASES, max_layers: int = 4) -> Case:
    """One captured graph (forward or backward) of a drawn model, FSDP-tagged for the reference."""
    desc = draw(model_descs(max_layers))
    phase = draw(st.sampled_from(phases))
    return Case(capture(desc).phase(phase), seed=draw(st.integers(0, 2**16)), label=f"captured:{phase}")


__all__ = ["WIDTHS", "captured_graphs", "model_descs"]
