"""subgpu_jax: operator graphs, configuration space, simulators and search for SubGPU pipelining
of LLM decode (see DESIGN: cut a region's operator graph into segments, bind them to disjoint SM
pools, stream microbatches through them)."""

from .hardware import HARDWARE, Hardware, get_hardware
from .models import MODELS, ModelArch, get_model, load_hf_config, resolve_model
from .graph import (CATEGORIES, REFERENCE_DEPLOYMENT, Deployment, Kernel, OpGraph,
                    StaticDurationModel, build_graph)

__all__ = [
    "HARDWARE", "Hardware", "get_hardware", "MODELS", "ModelArch", "get_model", "load_hf_config",
    "resolve_model", "CATEGORIES", "REFERENCE_DEPLOYMENT", "Deployment", "Kernel", "OpGraph",
    "StaticDurationModel", "build_graph",
]

__version__ = "0.1.0"
