"""Applications: the grid sweep, the search job, distributed execution, reports, plots and the
``subgpu`` command line (``cli``)."""
