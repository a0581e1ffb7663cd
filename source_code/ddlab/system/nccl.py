"""NCCL paths: the environments that make NCCL choose how two GPUs of one machine talk.

Every module, script and notebook of the course asks this one for a path's variables, its
one-line explanation, its plot colour and whether it still lets NCCL use P2P over a given
link. A path is an :class:`NcclPath`; :data:`PATHS` holds them all:

* ``default``: NCCL's own defaults (no variable set);
* ``shm``: P2P off, so data is staged through shared host memory (NCCL's SHM transport);
* ``socket``: P2P, SHM and InfiniBand off, so NCCL uses its network transport over TCP
  between processes of one machine, as between two nodes;
* ``LOC``, ``NVL``, ``PIX``, ``PXB``, ``PHB``, ``SYS``: one ``NCCL_P2P_LEVEL`` each.

``NCCL_P2P_LEVEL`` is a *maximum distance* (NVIDIA NCCL User Guide, "Environment Variables"):
NCCL uses its P2P transport between two GPUs only when their path is no longer than the level.
LOC never; NVL only over NVLink; PIX up to GPUs behind the same PCIe switch; PXB across PCIe
switches but not through the CPU; PHB within one NUMA node, through the CPU (``NODE`` in
``nvidia-smi topo -m``, two host bridges of one NUMA node, counts as PHB); SYS also across
NUMA nodes, over the SMP interconnect (QPI/UPI). The level does not pick a link: with PIX two
NVLink-connected GPUs still use NVLink. Where P2P is not allowed NCCL falls back to SHM, unless
it judges a network card close to both GPUs faster (then NET/IB).

NVLink multicast (NVLS, "NVLink SHARP") is a separate switch. Importing ``ddlab`` sets no
variable, and no path removes an ``NCCL_NVLS_ENABLE`` inherited from the shell (a shared
machine's administrators may set one). Where the course turns multicast off it does so
explicitly, with :data:`MULTICAST_OFF`: the ``shm`` and ``socket`` paths always do (see
:data:`MULTICAST_TEXT`), and any caller may ask for it with ``environment(multicast_off=True)``.
:func:`recorded_environment` is what a run records, so the record shows every such setting.

Usage::

    from ddlab.system import nccl
    nccl.get("shm").environment({"NCCL_DEBUG": "INFO"})   # overrides for ddlab.measure.launch.run
    nccl.get(3).name                                         # "PHB" (legacy integer level)
    nccl.get("PIX").allows_p2p(topo.link(0, 1))
    print(nccl.level_table(topo))
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Optional, Sequence

SOURCE = ("NVIDIA NCCL User Guide, 'Environment Variables': NCCL_P2P_LEVEL ('the maximum distance between "
          "GPUs where NCCL will use the P2P transport', with the legacy integer values), NCCL_P2P_DISABLE, "
          "NCCL_SHM_DISABLE, NCCL_IB_DISABLE, NCCL_NVLS_ENABLE")
# Not in the User Guide: read from NCCL's source, src/graph/paths.cc (ncclTopoCheckNet,
# parameter NET_DISABLE_INTRA, default 0; the legacy-level table levelsOldToNew).
SOURCE_NET_DISABLE_INTRA = ("NCCL source, src/graph/paths.cc: ncclTopoCheckNet ('Check whether going through "
                            "the network would be faster than going through P2P/SHM') returns no when "
                            "NCCL_NET_DISABLE_INTRA=1")

# NCCL_P2P_LEVEL values, shortest distance first.
P2P_LEVELS = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")
# Integer values NCCL still accepts for NCCL_P2P_LEVEL ("Integer Values (Legacy)" in the User
# Guide: LOC 0, PIX 1, PXB 2, PHB 3, SYS 4, values greater than 4 read as SYS). There is no
# integer for NVL.
LEGACY_LEVELS = MappingProxyType({0: "LOC", 1: "PIX", 2: "PXB", 3: "PHB", 4: "SYS", 5: "SYS"})
# How far each `nvidia-smi topo -m` link kind is on NCCL's scale. NODE (between two PCIe host
# bridges of one NUMA node) counts as PHB: both stay within one NUMA node and go through the CPU.
KIND_LEVEL = MappingProxyType({"NVLINK": "NVL", "PIX": "PIX", "PXB": "PXB", "PHB": "PHB", "NODE": "PHB",
                               "SYS": "SYS"})

# NVLink multicast (NVLS) off: NCCL's NVLink SHARP and PyTorch's symmetric-memory multicast.
MULTICAST_OFF = MappingProxyType({"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"})
# The clause under a result whose recorded environment had NCCL_NVLS_ENABLE=0 (notebook 4 explains why once:
# with NVLS on, an NVSwitch machine's default path could all-reduce inside the switch, which the shm and socket
# paths cannot, so the rows would not compare like with like).
MULTICAST_OFF_WHY = "NVLS off (NCCL_NVLS_ENABLE=0 in every run's environment; notebook 4 says why)"
MULTICAST_TEXT = MappingProxyType({
    "nccl": ("NVLink multicast (NVLS): NCCL decides (NCCL_NVLS_ENABLE not set by the course; NVLS applies only "
             "to GPUs behind an NVSwitch that supports it; a value inherited from the shell is kept)"),
    "off": ("NVLink multicast (NVLS) off: NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1, so no "
            "collective can use the NVSwitch's multicast behind the path's back"),
})

_LEVEL_MEANING = {
    "LOC": ("never use P2P: NCCL falls back to shared host memory (SHM), or to its network transport where "
            "it judges a NIC close to the GPUs faster"),
    "NVL": "P2P only between GPUs connected through NVLink",
    "PIX": "P2P up to GPUs on the same PCIe switch (and over NVLink)",
    "PXB": "P2P up to GPUs connected through PCIe switches, possibly several hops, not through the CPU",
    "PHB": "P2P up to GPUs on the same NUMA node, through the CPU (NODE in nvidia-smi counts as PHB)",
    "SYS": "P2P between NUMA nodes too, across the SMP interconnect (QPI/UPI)",
}
_LEVEL_COLOUR = {"LOC": "#f4a261", "NVL": "#264653", "PIX": "#457b9d", "PXB": "#6d597a", "PHB": "#b56576",
                 "SYS": "#8d99ae"}


@dataclass(frozen=True)
class NcclPath:
    """One NCCL path: the variables it sets, why a learner would pick it, its plot colour,
    the transport ``NCCL_DEBUG=INFO`` should show between two GPUs of one node, and how it
    treats NVLink multicast (``"nccl"``: NCCL decides; ``"off"``: :data:`MULTICAST_OFF`)."""
    name: str
    env: Mapping[str, str]
    why: str
    colour: str
    transport: str
    aliases: tuple = ()
    multicast: str = "nccl"

    @property
    def p2p_level(self) -> str:
        """The NCCL_P2P_LEVEL this path amounts to (``None``: NCCL's own choice)."""
        if self.env.get("NCCL_P2P_DISABLE") == "1":
            return "LOC"
        return self.env.get("NCCL_P2P_LEVEL")

    def allows_p2p(self, link) -> Optional[bool]:
        """May NCCL use its P2P transport over ``link`` (a topology Link, or a link kind such
        as ``"NVLINK"`` or ``"NODE"``) under this path? ``None`` for ``default``: NCCL then
        starts from :data:`DEFAULT_LEVEL` (PXB), raised to SYS on AMD CPUs for jobs of at most two
        GPUs, so the answer depends on the CPU, which a link does not say.

        Allowed is not the same as used: the platform must also support peer access for the
        pair (often not across CPU sockets), which NCCL checks separately."""
        kind = str(getattr(link, "kind", link)).strip().upper()
        if kind not in KIND_LEVEL:
            raise ValueError(f"unknown link kind {kind!r}; expected one of {', '.join(KIND_LEVEL)}")
        level = self.p2p_level
        if level is None:
            return None
        return P2P_LEVELS.index(KIND_LEVEL[kind]) <= P2P_LEVELS.index(level)

    def environment(self, base: Optional[Mapping[str, Optional[str]]] = None, multicast_off: bool = False) -> dict:
        """Overrides for :func:`ddlab.measure.launch.run`: this path's variables, every other variable
        of :data:`VARIABLES` set to ``None`` (removed, so one left in the user's shell cannot
        change the path), :data:`MULTICAST_OFF` when this path or the caller turns NVLS off,
        then ``base`` (``None`` removes a variable). Multicast variables are never removed:
        with NVLS left to NCCL, a value inherited from the shell stays."""
        out: dict = {k: None for k in VARIABLES}
        out.update(self.env)
        if multicast_off or self.multicast == "off":
            out.update(MULTICAST_OFF)
        out.update(base or {})
        return out

    def env_text(self) -> str:
        """``"NCCL_P2P_LEVEL=LOC ..."``, or ``"NCCL defaults"`` for a path that sets nothing."""
        return " ".join(f"{k}={v}" for k, v in self.env.items()) or "NCCL defaults"

    def describe(self, multicast_off: bool = False) -> str:
        """One line: name, variables, why, and what happens to NVLink multicast."""
        off = multicast_off or self.multicast == "off"
        return f"{self.name} ({self.env_text()}): {self.why}. {MULTICAST_TEXT['off' if off else 'nccl']}."


def _level_path(level: str) -> NcclPath:
    transport = "SHM (or NET/IB where NCCL judges a close NIC faster)" if level == "LOC" else \
        "P2P where the level allows, else SHM"
    return NcclPath(name=level, env=MappingProxyType({"NCCL_P2P_LEVEL": level}),
                    why=_LEVEL_MEANING[level], colour=_LEVEL_COLOUR[level],
                    transport=transport, aliases=(level.lower(),))


PATHS = {
    "default": NcclPath(
        "default", MappingProxyType({}),
        "NCCL's own choice: its P2P transport, each GPU writing straight into its peer's memory over NVLink "
        "where there is one (hundreds of GB/s), otherwise over PCIe where the topology allows it",
        "#2a9d8f", "P2P where allowed", ("p2p", "nvlink")),
    # LOC switches P2P off; NCCL_NET_DISABLE_INTRA=1 stops NCCL from replacing SHM by its
    # network transport (NET/IB) on machines with a NIC close to the GPUs, so "shm" stays SHM
    # (SOURCE_NET_DISABLE_INTRA: NCCL's source, not its User Guide, documents the variable).
    "shm": NcclPath(
        "shm", MappingProxyType({"NCCL_P2P_LEVEL": "LOC", "NCCL_NET_DISABLE_INTRA": "1"}),
        "no peer access and no network inside the node, so data is staged through shared host memory: GPU to "
        "host over PCIe, then host to GPU, tens of GB/s at best",
        "#e9c46a", "SHM", ("p2p-off", "p2p off", "shared memory", "host"), multicast="off"),
    # NCCL_IB_DISABLE=1 keeps the network transport on TCP sockets (NET/Socket) on machines that
    # also have InfiniBand/RoCE adapters, where NCCL would otherwise loop back through the adapter.
    "socket": NcclPath(
        "socket", MappingProxyType({"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1"}),
        "no peer access, no shared memory, no InfiniBand: NCCL's network transport over TCP, as between two "
        "nodes without InfiniBand; the kernel copies every byte and each message costs tens of microseconds",
        "#e76f51", "NET/Socket", ("sockets", "net", "tcp", "net/socket"), multicast="off"),
    **{level: _level_path(level) for level in P2P_LEVELS},
}
COMPARED = ("default", "shm", "socket")
# Every variable a path sets; each path removes the ones it does not set.
VARIABLES = tuple(dict.fromkeys(k for p in PATHS.values() for k in p.env))


def _index() -> dict:
    out = {}
    for p in PATHS.values():
        for key in (p.name, *p.aliases):
            out[key.lower()] = p
    return out


_BY_NAME = _index()


def choices() -> str:
    """The valid names, for messages."""
    return (", ".join(PATHS) + "; aliases " + ", ".join(a for p in PATHS.values() for a in p.aliases
                                                         if a != p.name.lower())
            + "; legacy NCCL_P2P_LEVEL integers 0-5")


def get(path) -> NcclPath:
    """The :class:`NcclPath` for a name (any case), an alias (``"p2p off"``, ``"tcp"``), a
    legacy ``NCCL_P2P_LEVEL`` integer (``3`` or ``"3"``: PHB; above 4: SYS), or an NcclPath."""
    if isinstance(path, NcclPath):
        return path
    if isinstance(path, bool):
        raise ValueError(f"unknown NCCL path {path!r}; choose one of: {choices()}")
    if isinstance(path, int) or (isinstance(path, str) and path.strip().isdigit()):
        n = int(path)
        if n < 0:
            raise ValueError(f"NCCL_P2P_LEVEL {n} is negative; the legacy integers are 0 (LOC) to 4 (SYS)")
        return PATHS[LEGACY_LEVELS[min(n, max(LEGACY_LEVELS))]]
    if isinstance(path, str) and path.strip().lower() in _BY_NAME:
        return _BY_NAME[path.strip().lower()]
    raise ValueError(f"unknown NCCL path {path!r}; choose one of: {choices()}")


def colour(path, fallback: str = "#4c72b0") -> str:
    """A path's plot colour; ``fallback`` for anything that is not a path (a baseline row)."""
    try:
        return get(path).colour
    except ValueError:
        return fallback


def multicast_was_off(env: Optional[Mapping[str, Optional[str]]]) -> bool:
    """Did a run with this recorded environment have NVLink multicast off (``NCCL_NVLS_ENABLE=0``)?"""
    return str((env or {}).get("NCCL_NVLS_ENABLE", "")).strip() == "0"


def display_name(path, env: Optional[Mapping[str, Optional[str]]] = None) -> str:
    """What a table or a legend calls a path: its name, except ``default``, which is called what it
    was: "NCCL default", and "NCCL default, NVLS off" when ``env`` (the run's recorded environment:
    NCCL's own report, the workers' or the shell's variables) has ``NCCL_NVLS_ENABLE=0``. Stored
    results keep the key ``default``; only the name shown changes. Anything that is not a path (a
    baseline row such as "1 worker", "gloo") is returned as it is."""
    try:
        p = get(path)
    except ValueError:
        return str(path)
    if p.name != "default":
        return p.name
    return "NCCL default, NVLS off" if multicast_was_off(env) else "NCCL default"


def recorded_environment(env: Mapping[str, Optional[str]]) -> dict:
    """What a run records of its workers' environment (``env``: the full environment they
    saw, e.g. :func:`ddlab.measure.launch.worker_environment`): every ``NCCL_*`` variable, set by the
    path or inherited from the shell, and the multicast switches of :data:`MULTICAST_OFF`."""
    return {k: str(v) for k, v in sorted(env.items())
            if v is not None and (k.startswith("NCCL_") or k in MULTICAST_OFF)}


# --------------------------------------------------------------------------- levels over a topology
# NVB: two GPUs with no NVLink of their own that are both NVLinked to a third GPU. NCCL routes such a
# pair over NVLink through that GPU (one hop at most) unless NCCL_NVB_DISABLE=1, and ranks the
# route NVB, after NVL and before every PCIe path, so NCCL_P2P_LEVEL=NVL refuses it and PIX and
# above allow it. NCCL builds its topology from the GPUs of the communicator's ranks only, and
# ncclTopoCheckP2p takes the relay from that topology: the third GPU must be a rank of the same
# job. A 2-GPU job on such a pair has no relay, and its `nvidia-smi topo -m` link decides (the
# bootcamp's log of DGX-1 GPUs 1 and 7 reads "via direct shared memory").
SOURCE_NVB = ("NVIDIA NCCL User Guide, 'Environment Variables', NCCL_NVB_DISABLE (since 2.11: 'Disable intra-node "
              "communication through NVLink via an intermediate GPU', default 0); NCCL source, src/graph/topo.cc "
              "(topoPathTypeStr: LOC, NVL, NVB, C2C, PIX, PXB, ...; the topology holds the communicator's GPUs) and "
              "src/graph/paths.cc (ncclTopoSetPaths: 'allow routing through a GPU only as 1 hop', over NVLink, "
              "unless NCCL_NVB_DISABLE; ncclTopoCheckP2p: P2P when the path type is at most the level, whose "
              "default is PXB)")
# NCCL's path kinds between two GPUs of one machine, nearest first (C2C, a CPU-GPU link, left out).
PATH_KINDS = ("LOC", "NVL", "NVB", "PIX", "PXB", "PHB", "SYS")
CHANNELS_NOTE = ("which pairs may use P2P, not which exchange data: NCCL builds several channels (rings or trees "
                 "through all the GPUs, each from its own search), and only pairs that some channel makes "
                 "neighbours carry traffic; NCCL_DEBUG=INFO's 'via P2P/...' lines say what it chose")


def nvb_via(topology, a: int, b: int, job: Optional[Sequence[int]] = None) -> Optional[int]:
    """The GPU through which NCCL routes ``a`` and ``b`` over NVLink (its NVB path) when the pair has no
    NVLink of its own but both GPUs have one to a third GPU that is a rank of the same job (the
    lowest-numbered such GPU); ``None`` when the pair has its own NVLink or no GPU of the job joins
    both. ``job``: the GPUs the job runs on (None: every GPU of ``topology``); NCCL sees only those
    (:data:`SOURCE_NVB`), so a 2-GPU job never has a relay."""
    if str(topology.link(a, b).kind).upper() == "NVLINK":
        return None
    ranks = topology.gpus if job is None else [g for g in topology.gpus if g in set(job)]
    for g in ranks:
        if g not in (a, b) and all(str(topology.link(g, x).kind).upper() == "NVLINK" for x in (a, b)):
            return g
    return None


def path_kind(topology, a: int, b: int, nvb: bool = True, job: Optional[Sequence[int]] = None) -> str:
    """NCCL's path kind between GPUs ``a`` and ``b`` (:data:`PATH_KINDS`): NVL over their own NVLink,
    NVB through a GPU of the same ``job`` NVLinked to both (unless ``nvb`` is False, as with
    NCCL_NVB_DISABLE=1), else the level of their `nvidia-smi topo -m` link (NODE counts as PHB)."""
    kind = str(topology.link(a, b).kind).strip().upper()
    if kind not in KIND_LEVEL:
        raise ValueError(f"unknown link kind {kind!r}; expected one of {', '.join(KIND_LEVEL)}")
    if nvb and nvb_via(topology, a, b, job) is not None:
        return "NVB"
    return KIND_LEVEL[kind]


# The level NCCL applies when NCCL_P2P_LEVEL and NCCL_P2P_DISABLE are unset (ncclTopoCheckP2p,
# src/graph/paths.cc: "By default don't use P2P across CPU Host Bridges and further apart"): PXB, so a
# PHB, NODE or SYS pair gets SHM with nothing set. Current NCCL raises it to SYS on AMD x86 CPUs when
# the job has at most two GPUs.
DEFAULT_LEVEL = "PXB"
DEFAULT_LEVEL_AMD_TWO_GPUS = "SYS"


def level_allows(level: str, kind: str) -> bool:
    """May NCCL use P2P over a path of ``kind`` (:data:`PATH_KINDS`) under ``NCCL_P2P_LEVEL=level``?"""
    return PATH_KINDS.index(kind) <= PATH_KINDS.index(get(level).p2p_level)


@dataclass(frozen=True)
class LevelTable:
    """For each NCCL_P2P_LEVEL, which GPU pairs of a topology may use P2P. ``rows``: one dict
    per level with ``level``, ``labels`` (link labels allowed, best first; a pair NCCL routes through
    another GPU is labelled "<its label> via NVB") and ``pairs``. ``nvb_pairs``: how many pairs take
    the NVB route; ``nvb``: whether the table allows it (False: as with NCCL_NVB_DISABLE=1)."""
    rows: tuple
    total_pairs: int
    levels: tuple = field(default=P2P_LEVELS)
    nvb_pairs: int = 0
    nvb: bool = True

    def __str__(self) -> str:
        return str(self.table())

    def splitlines(self) -> list:
        return str(self).splitlines()

    def notes(self) -> list:
        """What the table does and does not say: NVB (whether it applies here) and NCCL's channels."""
        out = []
        if not self.nvb:
            out.append("NVB left out, as with NCCL_NVB_DISABLE=1: each pair is judged by its own link")
        elif self.nvb_pairs:
            out.append(f"via NVB: {self.nvb_pairs} pair(s) with no NVLink of their own, each joined by NVLink to "
                       "a third GPU; in a job that includes that GPU, NCCL routes them through it (path type NVB, "
                       "after NVL, before PIX), so PIX and above allow P2P for them and NVL does not; a 2-GPU job "
                       "has no relay, and NCCL_NVB_DISABLE=1 turns the route off")
        else:
            out.append("NVB (NVLink through a third GPU) does not arise here: no pair lacks NVLink while "
                       "sharing an NVLinked GPU")
        return out + [CHANNELS_NOTE]

    def table(self):
        """The same rows as a :class:`ddlab.base.tables.Table` (HTML in Jupyter, text in a terminal)."""
        from ddlab.base.tables import Table
        rows = [{"level": r["level"], "labels": ", ".join(r["labels"]) or "none: P2P off", "pairs": r["pairs"]}
                for r in self.rows]
        return Table([("level", "text", "NCCL_P2P_LEVEL"), ("labels", "text", "P2P allowed over"),
                      ("pairs", "int", f"pairs (of {self.total_pairs})")], rows, notes=self.notes())

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()


def level_table(topology, nvb: bool = True) -> LevelTable:
    """For each NCCL_P2P_LEVEL, which GPU pairs of ``topology`` may use P2P (by link label), with
    NCCL's NVB route (:func:`nvb_via`) unless ``nvb`` is False. ``print()`` it for the text table;
    its notes say what it leaves to NCCL (the channels it builds)."""
    gpus = list(topology.gpus)
    pairs = [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1:]]
    if not pairs:
        raise ValueError("this topology has fewer than two GPUs: no pair to use P2P between")
    by_label: dict = {}                       # label -> [path kind, best rank, pairs]
    for a, b in pairs:
        ln = topology.link(a, b)
        kind = path_kind(topology, a, b, nvb)
        label = f"{ln.label} via NVB" if kind == "NVB" else ln.label
        entry = by_label.setdefault(label, [kind, ln.rank, 0])
        entry[2] += 1
    labels = sorted(by_label, key=lambda lab: (PATH_KINDS.index(by_label[lab][0]), -by_label[lab][1]))
    rows = []
    for lvl in P2P_LEVELS:
        ok = [lab for lab in labels if level_allows(lvl, by_label[lab][0])]
        rows.append({"level": lvl, "labels": ok, "pairs": sum(by_label[lab][2] for lab in ok)})
    nvb_pairs = sum(v[2] for v in by_label.values() if v[0] == "NVB")
    return LevelTable(tuple(rows), len(pairs), nvb_pairs=nvb_pairs, nvb=nvb)


def pair_levels(topology, nvb: bool = True, measured: Optional[Mapping[str, str]] = None):
    """What each NCCL_P2P_LEVEL, and no level at all, lets NCCL use between each kind of GPU pair of
    ``topology``, as a :class:`ddlab.base.tables.Table`: one row per link label (its pairs, the label,
    NCCL's path kind), one column per level, "P2P" where the level allows it and "no P2P" where it does
    not (NCCL then joins the pair through shared host memory, or its network where it judges that
    faster); the column ``unset`` applies :data:`DEFAULT_LEVEL`. A pair NCCL routes through a third GPU
    (NVB) gets two rows: in a job on every GPU of the topology, and as a 2-GPU job of its own, where
    NCCL sees no relay (:func:`nvb_via`). A prediction from the topology by :func:`level_allows`.
    ``measured``: level -> the transports NCCL reported on this topology's pair (a two-GPU machine),
    added as a last row."""
    from ddlab.base.tables import Table
    gpus = list(topology.gpus)
    pairs = [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1:]]
    if not pairs:
        raise ValueError("this topology has fewer than two GPUs: no pair to use P2P between")
    groups: dict = {}                          # label -> (path kind, rank, pairs)
    for a, b in pairs:
        ln, kind = topology.link(a, b), path_kind(topology, a, b, nvb)
        if kind == "NVB":
            groups.setdefault(f"{ln.label} via NVB, job on all {len(gpus)} GPUs",
                              (kind, ln.rank, []))[2].append(f"{a}-{b}")
            kind = path_kind(topology, a, b, nvb, job=(a, b))
            groups.setdefault(f"{ln.label}, a 2-GPU job", (kind, ln.rank, []))[2].append(f"{a}-{b}")
            continue
        groups.setdefault(ln.label, (kind, ln.rank, []))[2].append(f"{a}-{b}")
    rows = []
    for label in sorted(groups, key=lambda lab: (PATH_KINDS.index(groups[lab][0]), -groups[lab][1])):
        kind, _, names = groups[label]
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        rows.append({"pairs": shown, "link": label, "kind": kind,
                     **{lvl: "P2P" if level_allows(lvl, kind) else "no P2P" for lvl in P2P_LEVELS},
                     "unset": "P2P" if level_allows(DEFAULT_LEVEL, kind) else "no P2P"})
    if measured:
        rows.append({"pairs": "measured", "link": "", "kind": "",
                     **{lvl: measured.get(lvl, "-") for lvl in P2P_LEVELS}, "unset": measured.get("unset", "-")})
    return Table([("pairs", "text", "GPU pairs"), ("link", "text", "topo -m"), ("kind", "text", "NCCL path"),
                  *[(lvl, "text") for lvl in P2P_LEVELS], ("unset", "text", f"unset ({DEFAULT_LEVEL})")], rows,
                 notes=["predicted from the topology: P2P where the path is no longer than the level"
                        + ("; the last row is what NCCL reported" if measured else "")])


# --------------------------------------------------------------------------- shell scripts
def cli(argv: list) -> int:
    """``python -m ddlab.system.nccl env PATH [--multicast-off]``: the path's settings as ``K=V`` words
    for a shell script (``env $(python -m ddlab.system.nccl env shm) python ...``); ``list``: one line
    per path with its settings and why."""
    import argparse
    import sys
    p = argparse.ArgumentParser(prog="python -m ddlab.system.nccl", description="The course's NCCL paths.")
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("env", help="the variables a path sets, as K=V words")
    e.add_argument("path")
    e.add_argument("--multicast-off", action="store_true", help="also turn NVLink multicast (NVLS) off")
    sub.add_parser("list", help="every path, its settings and why")
    a = p.parse_args(argv)
    if a.cmd == "list":
        for path in PATHS.values():
            print(path.describe())
        return 0
    try:
        path = get(a.path)
    except ValueError as exc:
        print(f"python -m ddlab.system.nccl: {exc}", file=sys.stderr)
        return 2
    env = path.environment(multicast_off=a.multicast_off)
    print(" ".join(f"{k}={v}" for k, v in env.items() if v is not None))
    return 0


if __name__ == "__main__":
    import sys
    sys.exit(cli(sys.argv[1:]))
