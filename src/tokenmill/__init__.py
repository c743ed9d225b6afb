"""tokenmill: plan, simulate and serve hybrid Mixture-of-Experts language models.

Data flows one way: spec -> plan -> perf -> core -> metrics -> report (see docs/DESIGN.md).
"""

__version__ = "0.1.0"
