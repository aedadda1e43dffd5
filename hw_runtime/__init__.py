"""hw_runtime: execute a subgpu configuration on an NVIDIA GPU with CUDA Green Contexts
(needs the ``gpu`` extra and a GPU; importing this package without one is fine)."""
