"""Real graphs: SimpleFSDP-style models captured through ``torch.compile`` (aot_autograd) on a fake
process group, FSDP-tagged for the reference planner, described as ``GraphSpec``s."""

from fsdp_verify.capture.model import Layer, ModelDesc, desc_from_json
from fsdp_verify.capture.trace import PHASES, CaptureError, Captured, capture

__all__ = ["PHASES", "CaptureError", "Captured", "Layer", "ModelDesc", "capture", "desc_from_json"]
