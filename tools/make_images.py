#!/usr/bin/env python
"""Write the course's generated images to images/ (``make images`` runs this).

* images/data_paths.png, images/host_staging.png, images/peer_to_peer.png - the data path
  between two GPUs with and without peer access (ddlab.views.diagrams);
* images/ring_allreduce.png - a ring all-reduce of 4 ranks step by step (ddlab.views.diagrams);
* images/topology_<name>.png - each recorded machine's `nvidia-smi topo -m` drawn as a graph
  (ddlab.views.topology_drawing).

The output is deterministic: fixed sizes and DPI, no timestamps or software version in the
PNG metadata, so regenerating an unchanged image leaves git with nothing to commit.

    python tools/make_images.py [--out images] [--only data_paths,topology_dgx1-v100]
"""
from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "source_code"))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ddlab.base import files  # noqa: E402

DPI = 110
# PNG text chunks matplotlib would otherwise write; 'Software' carries its version.
METADATA = {"Software": None}


def _save(fig, path: str) -> str:
    files.write_figure(path, fig, dpi=DPI, metadata=METADATA, bbox_inches="tight", facecolor="white")
    plt.close(fig)
    return path


def diagram_images() -> dict:
    """name -> function returning a Figure."""
    from ddlab.views import diagrams
    return {"data_paths": diagrams.data_paths, "host_staging": diagrams.host_staging,
            "peer_to_peer": diagrams.peer_to_peer, "ring_allreduce": diagrams.ring_allreduce}


def topology_images() -> dict:
    """topology_<name> -> function returning a Figure, for each recorded machine."""
    from ddlab.system import provenance, topology
    from ddlab.views import topology_drawing

    def drawer(name):
        def draw():
            topo = topology.recorded(name)
            ax = topology_drawing.draw(topo, title=f"{name}: {len(topo.gpus)} GPUs\n({provenance.caption(topo.provenance or {})})")
            return ax.figure
        return draw

    return {f"topology_{name}": drawer(name) for name in topology.recorded_names()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join(REPO, "images"), help="folder to write (default: images/)")
    p.add_argument("--only", help="comma-separated image names (without .png) to write")
    a = p.parse_args(argv)
    jobs = {**diagram_images(), **topology_images()}
    if a.only:
        wanted = [w.strip() for w in a.only.split(",") if w.strip()]
        unknown = [w for w in wanted if w not in jobs]
        if unknown:
            p.error(f"unknown image(s) {', '.join(unknown)}; available: {', '.join(sorted(jobs))}")
        jobs = {k: jobs[k] for k in wanted}
    os.makedirs(a.out, exist_ok=True)
    for name, make in jobs.items():
        print(_save(make(), os.path.join(a.out, name + ".png")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
