"""Layer 3, measurements: launching processes and measuring links (p2p, collectives)."""
