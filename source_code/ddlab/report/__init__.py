"""Layer 8, the lab report: ``ddlab report`` and ``ddlab doctor``."""
