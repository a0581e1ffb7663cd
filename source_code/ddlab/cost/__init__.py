"""Layer 5, models of cost: all-reduce algorithms and the step model."""
