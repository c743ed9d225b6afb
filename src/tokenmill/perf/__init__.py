"""How long things take: the time of one engine step, by phase and by resource, and the closed-loop
TTFT/TPOT of a deployment, with constants calibrated on measured serving results.

- ``CostModel`` (``roofline.py``): resource demands of a step and their time under ``PerfParams``.
- ``replay.py``: a fixed-length closed-loop benchmark point replayed through the serving core.
  ``stride_executor.py`` executes its steps; ``replay_disaggregated.py`` (with ``pipelined.py``)
  replays a disaggregated point; ``saturated.py`` stands in for lanes that only queue.
- ``calibrated``: the fitted constants shipped as data (``params_for(gpu, engine)``).
- ``measurements.py`` / ``row_prediction.py`` / ``scoring.py`` / ``calibrate.py``: measured rows,
  their predictions, their scores and the fit.

See docs/perf.md.
"""

from tokenmill.perf.batch import BatchShape, DecodeSum, DecodeWork, PrefillWork
from tokenmill.perf.params import PerfParams
from tokenmill.perf.roofline import CostModel, StepCost

__all__ = ["BatchShape", "CostModel", "DecodeSum", "DecodeWork", "PerfParams", "PrefillWork", "StepCost"]
