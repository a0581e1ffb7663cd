"""Which path NCCL chose: parse ``NCCL_DEBUG=INFO`` output into a transport table.

NCCL prints one line per connection it sets up, for example::

    host:1234:1301 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
    host:1234:1301 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] [send] via NET/Socket/0
    host:1234:1301 [0] NCCL INFO Ring 00 : 0[0] -> 1[1] via P2P/IPC               (NCCL 2.3 and older)

``rank[device] -> rank[device]`` names the two ranks; what follows ``via`` is the transport:
``P2P/...`` (GPU to GPU over NVLink or PCIe: ``P2P/IPC``, ``P2P/CUMEM``, ``P2P/direct pointer``,
``/read`` when the receiver reads), ``SHM/...`` or ``direct shared memory`` (staged through host
memory), ``NET/Socket/<i>`` (TCP), ``NET/IB/<i>[/GDRDMA]`` (InfiniBand/RoCE, GDRDMA = GPUDirect
RDMA) or another network plugin. NCCL also reports the settings it read from the environment
(``NCCL_P2P_LEVEL set by environment to LOC``), its version and the communicator size.

The parser looks for these patterns anywhere in a line, so prefixes added by launchers and log
collectors (``[1,0]<stdout>:``, ``[0]<stdout>:``, time stamps, ``host:pid:tid [dev]``) and lines
of several ranks interleaved do not matter. Lines it does not know are ignored; a text with no
NCCL line at all gives an empty log (``log.empty``).
"""
from __future__ import annotations

import html
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Optional

from ddlab.base.tables import Table

KINDS = ("P2P", "SHM", "NET/Socket", "NET/IB", "NET/other")
NO_NCCL_LINES = "no NCCL INFO lines found; run with NCCL_DEBUG=INFO"

_CONN = re.compile(
    r"\b(?P<form>Channel|Ring)\s+(?P<channel>\d+)(?:/(?P<conn>\d+))?\s*:\s*"
    r"(?P<src>\d+)(?:\[(?P<sdev>[^\]]*)\])?\s*->\s*(?P<dst>\d+)(?:\[(?P<ddev>[^\]]*)\])?"
    r"(?:\s*\[(?P<dir>send|receive)\])?\s+via\s+(?P<transport>.+?)\s*$")
# Newer NCCL appends "comm 0x... nRanks NN ..." to some lines: not part of the transport.
_TRAILER = re.compile(r"\s+comm\s+0x[0-9a-fA-F]+.*$")
_VERSION = re.compile(r"NCCL version\s+v?(?P<v>\d+\.\d+\.\d+)(?P<extra>\+\S+)?")
_ENV = re.compile(r"\b(?P<name>NCCL_[A-Z0-9_]+)\s+set by environment to\s+(?P<value>.*?)\s*$")
_NRANKS = re.compile(r"\bnranks\s+(\d+)", re.IGNORECASE)
# "24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels, ..." at init:
# the channels a collective runs on, each one thread block of the collective's kernel.
_COLL_CHANNELS = re.compile(r"\b(\d+) coll channels")
_SOURCE = re.compile(r"(?P<host>[\w.-]+):(?P<pid>\d+):(?P<tid>\d+)\s+\[(?P<dev>\d+)\]\s+NCCL\s")
_MARK = re.compile(r"NCCL (?:INFO|WARN)\b|NCCL version\s+\d")
# "NET/Socket : Using [0]eth0:192.0.2.2<0> [1]eth1:..." at init: the interfaces its sockets use.
_SOCKET_USING = re.compile(r"NET/Socket\s*:\s*Using\s+(?P<ifs>.*)$")
_SOCKET_IF = re.compile(r"\[\d+\]\s*(?P<name>[^\s:<\[]+)")


def transport_kind(transport: str) -> str:
    """Normalise a transport as printed to one of :data:`KINDS` (or "other" for a transport
    NCCL did not have when this was written)."""
    t = transport.strip().upper()
    if t.startswith("P2P"):
        return "P2P"
    if t.startswith("SHM") or "SHARED MEMORY" in t:
        return "SHM"
    if t.startswith("NET/SOCKET"):
        return "NET/Socket"
    if t.startswith("NET/IB"):  # NET/IB and the external IB plugins (NET/IBext...)
        return "NET/IB"
    if t.startswith("NET/"):
        return "NET/other"
    return "other"


@dataclass
class Connection:
    """One connection line: ``channel``, ``src_rank`` -> ``dst_rank``, ``transport`` as printed
    after ``via`` and its ``kind``. ``direction`` is "send"/"receive" where NCCL says it (network
    connections), ``form`` is "Channel" or the old "Ring", ``line`` the line number in the text."""
    channel: int
    src_rank: int
    dst_rank: int
    transport: str
    kind: str
    src_device: Optional[str] = None
    dst_device: Optional[str] = None
    direction: Optional[str] = None
    conn_index: Optional[int] = None
    form: str = "Channel"
    line: int = 0
    source: Optional[str] = None  # "host:pid" of the process that printed it, when shown


@dataclass
class NcclLog:
    version: Optional[str] = None
    version_full: Optional[str] = None
    connections: list = field(default_factory=list)
    env: dict = field(default_factory=dict)
    nranks: Optional[int] = None
    warnings: list = field(default_factory=list)
    nccl_lines: int = 0
    coll_channels: Optional[int] = None     # channels of a collective (one GPU thread block each)
    socket_interfaces: list = field(default_factory=list)   # the interfaces NET/Socket said it uses

    @property
    def empty(self) -> bool:
        """True when the text had no NCCL line at all (NCCL_DEBUG was not INFO)."""
        return self.nccl_lines == 0

    def transport_counts(self) -> dict:
        """Number of connections per kind (kinds with none left out), in :data:`KINDS` order."""
        c = Counter(x.kind for x in self.connections)
        return {k: c[k] for k in (*KINDS, "other") if c[k]}

    def transports(self) -> dict:
        """Number of connections per transport exactly as printed."""
        return dict(Counter(x.transport for x in self.connections).most_common())

    def summary(self) -> str:
        if self.empty:
            return NO_NCCL_LINES
        head = f"NCCL {self.version or '(version not shown)'}"
        if self.nranks:
            head += f", {self.nranks} ranks"
        if not self.connections:
            return head + ": no connection lines (the log may end before NCCL connected, or NCCL_DEBUG_SUBSYS " \
                          "hides them)"
        counts = self.transport_counts()
        if len(counts) == 1:
            return f"{head}: all {len(self.connections)} connections {next(iter(counts))}"
        return f"{head}: " + ", ".join(f"{n} {k}" for k, n in counts.items())

    def kind_table(self) -> Table:
        """Connections per kind of transport, with the transports as NCCL printed them."""
        by_kind: dict = {}
        for c in self.connections:
            by_kind.setdefault(c.kind, Counter())[c.transport] += 1
        return Table([("kind", "text"), ("connections", "int"), ("printed", "text", "transports as printed")],
                     [[kind, n, ", ".join(f"{t} ({m})" for t, m in by_kind[kind].most_common())]
                      for kind, n in self.transport_counts().items()])

    def pair_table(self) -> Table:
        """One row per pair of ranks: how many channels connect them, over which transport."""
        pairs: dict = {}
        for c in self.connections:
            pairs.setdefault((c.src_rank, c.dst_rank), []).append(c)
        rows = []
        for (s, d), cs in sorted(pairs.items()):
            ts = Counter(c.transport for c in cs)
            rows.append([f"{s} -> {d}", len({c.channel for c in cs}),
                         ", ".join(t if m == len(cs) else f"{t} ({m})" for t, m in ts.most_common())])
        return Table([("ranks", "text"), ("channels", "int"), ("transport", "text")], rows)

    def _parts(self) -> list:
        """The report in order: ("text", line) and ("table", Table) items."""
        if self.empty:
            return [("text", NO_NCCL_LINES)]
        parts = [("text", self.summary())]
        if self.env:
            parts.append(("text", "set by environment: " + ", ".join(f"{k}={v}" for k, v in self.env.items())))
        if self.connections:
            parts += [("table", self.kind_table()), ("table", self.pair_table())]
            if any(c.direction for c in self.connections):
                parts.append(("text", "(a network connection is printed by both ends: [send] by the sender, "
                                      "[receive] by the receiver, so it is counted twice)"))
        if self.socket_interfaces and "NET/Socket" in self.transport_counts():
            parts.append(("text", f"NET/Socket ran over interface {', '.join(self.socket_interfaces)}"))
        if self.warnings:
            parts.append(("text", f"NCCL warnings ({len(self.warnings)}):\n"
                          + "\n".join(f"  {w}" for w in self.warnings[:10])))
        return parts

    def table(self) -> str:
        """A readable report: the summary, the settings NCCL read, the transports by kind and
        by pair of ranks (:meth:`kind_table`, :meth:`pair_table`), and NCCL's warnings."""
        out = []
        for kind, part in self._parts():
            if kind == "table" or (out and part.startswith("NCCL warnings")):
                out.append("")
            out.append(str(part))
        return "\n".join(out)

    def _repr_html_(self) -> str:
        return "".join(part._repr_html_() if kind == "table" else f"<pre>{html.escape(part)}</pre>"
                       for kind, part in self._parts())

    def to_dict(self) -> dict:
        return {"version": self.version, "version_full": self.version_full, "nranks": self.nranks, "env": self.env,
                "transport_counts": self.transport_counts(), "transports": self.transports(),
                "connections": [asdict(c) for c in self.connections], "warnings": self.warnings,
                "nccl_lines": self.nccl_lines, "empty": self.empty, "coll_channels": self.coll_channels,
                "socket_interfaces": self.socket_interfaces}


def parse(text: str) -> NcclLog:
    """Parse NCCL_DEBUG=INFO output (any launcher's, ranks interleaved) into an :class:`NcclLog`."""
    if not isinstance(text, str):
        raise TypeError(f"nccl_log.parse needs the log text, got {type(text).__name__}")
    log = NcclLog()
    for number, raw in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), 1):
        line = raw.rstrip()
        conn = _CONN.search(line)
        if not (conn or _MARK.search(line)):
            continue
        log.nccl_lines += 1
        m = _VERSION.search(line)
        if m and log.version is None:
            log.version, log.version_full = m.group("v"), m.group("v") + (m.group("extra") or "")
        m = _ENV.search(line)
        if m:
            value = m.group("value")
            # NCCL's integer settings end in a full stop ("... to 1."); the value does not.
            log.env[m.group("name")] = value[:-1] if value.endswith(".") else value
        for n in _NRANKS.findall(line):
            log.nranks = max(log.nranks or 0, int(n))
        for n in _COLL_CHANNELS.findall(line):
            log.coll_channels = max(log.coll_channels or 0, int(n))
        m = _SOCKET_USING.search(line)
        if m:
            for name in _SOCKET_IF.findall(m.group("ifs")):
                if name not in log.socket_interfaces:
                    log.socket_interfaces.append(name)
        if "NCCL WARN" in line:
            log.warnings.append(line[line.index("NCCL WARN") + len("NCCL WARN"):].strip())
        if conn:
            transport = _TRAILER.sub("", conn.group("transport")).strip()
            src = _SOURCE.search(line[:conn.start()])
            log.connections.append(Connection(
                channel=int(conn.group("channel")), src_rank=int(conn.group("src")), dst_rank=int(conn.group("dst")),
                transport=transport, kind=transport_kind(transport), src_device=conn.group("sdev"),
                dst_device=conn.group("ddev"), direction=conn.group("dir"),
                conn_index=int(conn.group("conn")) if conn.group("conn") is not None else None,
                form=conn.group("form"), line=number,
                source=f"{src.group('host')}:{src.group('pid')}" if src else None))
    return log


def parse_file(path: str) -> NcclLog:
    with open(path, encoding="utf-8", errors="replace") as f:
        return parse(f.read())


def key_lines(text: str, per_kind: int = 2) -> list:
    """The lines of a log that show NCCL's choice, as NCCL printed them: each variable it read ("...
    set by environment to ...", once per variable) and the first ``per_kind`` connection lines of each
    kind of transport (P2P, SHM, NET...). What a learner reads beside :meth:`NcclLog.kind_table`."""
    seen_env, per = set(), {}
    out = []
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.rstrip()
        m = _ENV.search(line)
        if m and m.group("name") not in seen_env:
            seen_env.add(m.group("name"))
            out.append(line)
            continue
        conn = _CONN.search(line)
        if conn:
            kind = transport_kind(_TRAILER.sub("", conn.group("transport")).strip())
            if per.get(kind, 0) < per_kind:
                per[kind] = per.get(kind, 0) + 1
                out.append(line)
    return out
