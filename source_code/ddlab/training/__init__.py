"""Layer 4, training: run specs, models, data, throughput, runs, results, recordings and experiments."""
