"""How long things take: the time of one engine step, by phase and by resource.

``CostModel`` is a roofline over the model's tensor inventory and the layout's cut, with named
efficiency constants (``PerfParams``) that a later calibration fits to measurements.
"""

from tokenmill.perf.batch import BatchShape, DecodeWork, PrefillWork
from tokenmill.perf.params import PerfParams
from tokenmill.perf.roofline import CostModel, StepCost

__all__ = ["BatchShape", "CostModel", "DecodeWork", "PerfParams", "PrefillWork", "StepCost"]
