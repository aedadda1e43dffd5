"""The model layer (docs/method.md §1-2): hardware presets, model architectures, the operator
graph of a decode region, the one ``Workload``, calibration files, synthetic instances,
throughput accounting and the shared input checks. Imports nothing from later layers."""
