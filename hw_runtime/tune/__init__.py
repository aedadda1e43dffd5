"""``subgpu tune``: the simulator proposes, the GPU decides (docs/tune.md).

Modules: ``spec`` (options, candidates, predictions), ``executor`` (what the loop needs from a
GPU, and the real one), ``loop`` (search, measure, refit, repeat), ``refit`` (a calibration from
traced runs), ``refine`` (Algorithm 2 on measured makespans), ``state`` (the resumable state),
``report`` (what it returns and writes), ``cli`` (the sub-command).
"""
