"""The recording layer: what the GPU machine records and how its results come home.

Only the scripts under ``tools/recording/`` use it; no notebook and no other layer imports it.
:mod:`ddlab.recording.sets` records the course's training sets, joins strong-scaling parts and runs
a script's jobs while time is left; :mod:`ddlab.recording.resume` continues a tuning comparison
that was cut short.
"""
