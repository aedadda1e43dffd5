"""The GPU half of the runtime (needs the ``gpu`` extra at call time): green-context partitions,
torch kernels (``kernels``), the torch workload, the executor and the kernel-time calibration.
Importing these modules without torch or a GPU is fine."""
