"""What a step costs: the cost-model interface, analytic and calibrated models, the gamma view."""

from specplan.cost_models.base import CostModel, StepBatch

__all__ = ["CostModel", "StepBatch"]
