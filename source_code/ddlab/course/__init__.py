"""Layer 7, the course: live-or-recorded parts, exercises, widgets, diagrams and the case studies."""
