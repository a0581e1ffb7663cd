"""Layer 6, views: drawings, plots and heatmaps of the data below, each taking that data as arguments."""
