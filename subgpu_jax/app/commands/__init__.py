"""The bodies of the ``subgpu`` sub-commands of this package, one module per command:
``simulate``, ``search`` and ``space``, each with the ``add_*_parser`` that adds its
sub-parser and the ``cmd_*`` that runs it; the options themselves and the checked workload of
parsed ones (``workload_of``) are in ``app/args.py``. ``app.cli`` builds the parser from them
and dispatches. They import ``app`` and lower layers, never ``app.cli`` (under ``python -m
subgpu_jax.app.cli`` that module is ``__main__``: importing it again would load it twice).

Nothing is imported at package level: ``subgpu_jax.app`` stays light to import.
"""
