"""ddlab: the code behind the course "Distributed Deep Learning: GPU System Topology".

The package is layered; each layer imports only from the layers below it (README.md in this
folder has the picture, and import-linter checks it in CI):

    recording  what the GPU machine records, joins and resumes (tools/recording/ only)
    report     ddlab report, ddlab doctor
    course     live-or-recorded parts, exercises, widgets, diagrams, case studies, hands-on
    views      drawings, plots and heatmaps of the data below
    cost       all-reduce algorithms and the step model
    training   run specs, models, data, runs, results, recorded results, experiments
    measure    launching processes; p2p and collective measurements
    system     hardware, topology, links, NCCL paths and logs, provenance
    base       units, tables, paths, files of record

Importing ddlab changes no environment variable: NCCL settings (NVLink multicast included)
are chosen per run through ddlab.system.nccl and recorded with it.
"""
__version__ = "0.1.0"
