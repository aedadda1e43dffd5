"""What measures a prepared run on a GPU: the ``Measurer`` protocol, shared by ``subgpu run``
(``run.GpuMeasurer``, which ``run.run_one`` uses unless given another) and ``subgpu tune``
(``hw_runtime.tune.executor.GpuTuneExecutor``, a ``GpuMeasurer`` that also times candidates one
at a time). Tests stand a fake measurer in for the GPU (``tests/hw_runtime/
test_gpu_commands_fake.py``).

Pure Python: importable without torch or a GPU.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from hw_runtime.commands.report import RunReport

__all__ = ["Measurer"]


@runtime_checkable
class Measurer(Protocol):
    """The GPU as ``subgpu run`` sees it."""

    def report(self, prep, make_trace: bool = False) -> RunReport:
        """Measure ``prep`` (a ``run.PreparedRun``: its workload, configuration, kernel
        choices, collectives, mode and timing) on the GPU: its temporal baseline and its
        configuration, each a whole decode step (µs); predict both and compare
        (``run.run_report``).

        Args:
            prep: the CPU part of the run (``run.prepare_run``).
            make_trace: also profile one replay and write the request's Perfetto trace
                (the report's ``timeline``).

        Returns:
            the ``RunReport``.

        Raises:
            ValueError: the workload does not fit in the GPU's memory, or a green-context
                error (one line).
        """

    def release(self) -> None:
        """Free the GPU memory held for the last workload measured."""
