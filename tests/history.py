"""Transaction histories and a checker for the anomalies snapshot isolation forbids.

A history is what clients saw: every transaction's reads (the values it read), its writes, its
snapshot and commit timestamps and its outcome (`ok`, `fail`, or `unknown` when the client died or
the coordinator stopped answering mid-commit; `resolved` then holds what the coordinator said
afterwards, if anyone asked). tests/torture.py records histories of real runs; the checker is
tested against made-up histories with planted anomalies (tests/txn/test_history_checker.py).

The workload is built so that every version order can be recovered from the values alone (the idea
of Jepsen's Elle: make writes unique and reads return whole objects):

* **set objects** `(table, key)`: transactions append unique values (one row `(key, value)` each)
  and read a key whole. Appends never conflict, so under snapshot isolation the sets read of one key
  form a chain S1 ⊆ S2 ⊆ ... and the values of a key fall into layers: the values first seen by
  the i-th smallest read.
* **registers** `(table, key)`: a transaction reads the register's list and overwrites it with
  the list plus one unique value (only the last `window` values are kept). The last value names the
  version, the one before it its parent: the versions form a tree, and snapshot isolation keeps it
  a chain (first committer wins).

Operations (tuples): `("r", table, key, values)` read a set object; `("a", table, key, value)`
append; `("rr", table, key, values)` read a register (its list); `("w", table, key, values)` write
a register (its new list).

What is reported (Elle's vocabulary, Adya's phenomena):
  G0             a cycle of write-write dependencies (register version orders that disagree)
  G1a            a read of a value written by a transaction that aborted
  G1b            a read of a transaction's intermediate state of an object (not its final write)
  G1c            a cycle of write-write and write-read dependencies
  G-single       a cycle with exactly one read-write anti-dependency (a read missed a write that
                 the reader otherwise depends on); `read-skew` when the missed write and the
                 dependency reached the reader through different tables
  fractured-read a transaction saw part of another transaction's writes and missed the rest
  lost-update    two committed transactions overwrote the same register version
  internal       a read that misses the transaction's own earlier writes
  garbage-read   a value nobody wrote, or a register list that no write produced
  incompatible-order  reads of one set object that do not form a chain
  non-repeatable-read the same object read twice in a transaction with different results
  lost-write     an acknowledged write missing from the final read (durability)
  duplicate-write a value written twice (a workload error: values must be unique)

Dependency graph: a node per transaction that committed (or whose writes were read); edges
write-read (W's value read by R), write-write (register parent → child) and read-write (R read
a version that W's write follows). G0/G1c are the strongly connected components of the ww+wr
graph (iterative Tarjan, linear). For G-single each read-write edge R → W needs "does W reach R
through ww/wr edges": in general a reachability question per edge, so the checker first tries a
certificate: if every ww/wr edge A → B has csn(A) ≤ snapshot(B) and every writer snapshot < csn,
any path W ⇝ R implies csn(W) ≤ snapshot(R); only read-write edges with csn(W) ≤ snapshot(R) can
then close a cycle, and only those are searched. The certificate is checked edge by edge, never
assumed; when it fails (timestamps missing or contradicted), every read-write edge inside a
strongly connected component of the whole graph is searched.
"""

from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

READ, APPEND, REG_READ, REG_WRITE = "r", "a", "rr", "w"
KINDS = ("G0", "G1a", "G1b", "G1c", "G-single", "read-skew", "fractured-read", "lost-update", "internal",
         "garbage-read", "incompatible-order", "non-repeatable-read", "lost-write", "duplicate-write")
MAX_EXAMPLES = 5  # anomalies described in full per kind (all are counted)
MAX_SEARCHES = 2000  # reachability searches for G-single before giving up (reported)


@dataclass
class Txn:
    index: int
    process: str
    ops: list[tuple]
    outcome: str = "ok"  # ok | fail | unknown
    tid: int | None = None
    snapshot: int | None = None
    csn: int | None = None  # commit timestamp (None for read-only or undecided transactions)
    resolved: str | None = None  # for unknown outcomes: "committed" / "aborted" as learnt afterwards
    final: bool = False  # the read of everything after the run (checked for lost writes)

    def to_json(self) -> dict:
        return {"i": self.index, "p": self.process, "ops": [list(op[:3]) + [_plain(op[3])] for op in self.ops],
                "o": self.outcome, "tid": self.tid, "s": self.snapshot, "c": self.csn, "res": self.resolved,
                "final": self.final}

    @staticmethod
    def from_json(data: dict) -> Txn:
        ops = [(op[0], op[1], op[2], tuple(op[3]) if isinstance(op[3], list) else op[3]) for op in data["ops"]]
        return Txn(data["i"], data["p"], ops, data["o"], data.get("tid"), data.get("s"), data.get("c"),
                   data.get("res"), data.get("final", False))


def _plain(value: object) -> object:
    return list(value) if isinstance(value, (tuple, list, set, frozenset)) else value


def save(history: Sequence[Txn], path: Path) -> None:
    with open(path, "w") as out:
        for txn in history:
            out.write(json.dumps(txn.to_json(), separators=(",", ":")) + "\n")


def load(path: Path) -> list[Txn]:
    with open(path) as source:
        return [Txn.from_json(json.loads(line)) for line in source if line.strip()]


@dataclass
class Anomaly:
    kind: str
    txns: tuple[int, ...]
    text: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.text}"


@dataclass
class CheckResult:
    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[Anomaly]] = field(default_factory=dict)
    stats: dict[str, int | float | str] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def valid(self) -> bool:
        return self.total == 0

    def add(self, kind: str, txns: Iterable[int], text: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        shown = self.examples.setdefault(kind, [])
        if len(shown) < MAX_EXAMPLES:
            shown.append(Anomaly(kind, tuple(txns), text))

    def kinds(self) -> set[str]:
        return {kind for kind, n in self.counts.items() if n}

    def summary(self) -> str:
        found = ", ".join(f"{k} {n}" for k, n in sorted(self.counts.items()) if n) or "none"
        return f"anomalies: {found}; " + ", ".join(f"{k} {v}" for k, v in self.stats.items())

    def report(self) -> str:
        lines = [self.summary()]
        for kind in KINDS:
            for anomaly in self.examples.get(kind, []):
                lines.append(f"  {anomaly}")
        return "\n".join(lines)


class _Graph:
    """Edges as parallel lists: source, target, kind ("ww", "wr", "rw"), object (table, key)."""

    def __init__(self) -> None:
        self.src: list[int] = []
        self.dst: list[int] = []
        self.kind: list[str] = []
        self.obj: list[tuple] = []

    def add(self, a: int, b: int, kind: str, obj: tuple) -> None:
        if a != b:
            self.src.append(a)
            self.dst.append(b)
            self.kind.append(kind)
            self.obj.append(obj)

    def adjacency(self, kinds: set[str], nodes: int) -> list[list[int]]:
        """Per node the indexes of its outgoing edges of the given kinds."""
        out: list[list[int]] = [[] for _ in range(nodes)]
        for e, k in enumerate(self.kind):
            if k in kinds:
                out[self.src[e]].append(e)
        return out


def _strong_components(nodes: int, out: list[list[int]], dst: list[int]) -> list[int]:
    """Tarjan's algorithm without recursion; returns each node's component id."""
    index = [-1] * nodes
    low = [0] * nodes
    on_stack = [False] * nodes
    component = [-1] * nodes
    stack: list[int] = []
    counter = 0
    components = 0
    for root in range(nodes):
        if index[root] != -1:
            continue
        work = [(root, 0)]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        while work:
            node, position = work[-1]
            edges = out[node]
            if position < len(edges):
                work[-1] = (node, position + 1)
                nxt = dst[edges[position]]
                if index[nxt] == -1:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack[nxt] = True
                    work.append((nxt, 0))
                elif on_stack[nxt] and index[nxt] < low[node]:
                    low[node] = index[nxt]
                continue
            work.pop()
            if work and low[node] < low[work[-1][0]]:
                low[work[-1][0]] = low[node]
            if low[node] == index[node]:
                while True:
                    member = stack.pop()
                    on_stack[member] = False
                    component[member] = components
                    if member == node:
                        break
                components += 1
    return component


def _path(graph: _Graph, out: list[list[int]], start: int, goal: int, allowed: object = None,
          limit: int | None = None) -> list[int] | None:
    """Edge indexes of a shortest path start ⇝ goal over `out` (nodes filtered by `allowed(node)`)."""
    if start == goal:
        return []
    came: dict[int, int] = {start: -1}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for e in out[node]:
            nxt = graph.dst[e]
            if nxt in came or (allowed is not None and nxt != goal and not allowed(nxt)):  # type: ignore[operator]
                continue
            came[nxt] = e
            if nxt == goal:
                edges = []
                while nxt != start:
                    edges.append(came[nxt])
                    nxt = graph.src[came[nxt]]
                return edges[::-1]
            if limit is not None and len(came) > limit:
                return None
            queue.append(nxt)
    return None


def check(history: Sequence[Txn]) -> CheckResult:
    """Find the anomalies snapshot isolation forbids in `history` (see the module's docstring)."""
    result = CheckResult()
    txns = list(history)
    n = len(txns)
    name = [t.index for t in txns]

    def describe(i: int) -> str:
        t = txns[i]
        ops = " ".join(_show(op) for op in t.ops[:6]) + (" ..." if len(t.ops) > 6 else "")
        return (f"T{t.index}[{t.process} {t.outcome}{'/' + t.resolved if t.resolved else ''} s={t.snapshot} "
                f"c={t.csn}: {ops}]")

    # ---- who wrote what
    failed = [t.outcome == "fail" or (t.outcome == "unknown" and t.resolved == "aborted") for t in txns]
    committed = [t.outcome == "ok" or (t.outcome == "unknown" and t.resolved == "committed") for t in txns]
    writer: dict[object, int] = {}  # appended value -> txn position
    writer_obj: dict[object, tuple] = {}
    appended: dict[tuple[int, tuple], list] = {}  # (txn, object) -> values in order
    by_object: dict[tuple, list[int]] = defaultdict(list)  # object -> txns that appended to it
    written_objects: dict[int, list[tuple]] = defaultdict(list)
    reg_writer: dict[object, tuple[int, tuple, tuple]] = {}  # register value -> (txn, object, list)
    reg_final: dict[tuple[int, tuple], object] = {}  # (txn, object) -> its last value written
    reg_written: dict[int, list[tuple]] = defaultdict(list)
    for i, t in enumerate(txns):
        for op in t.ops:
            kind = op[0]
            if kind == APPEND:
                value, obj = op[3], (op[1], op[2])
                if value in writer or value in reg_writer:
                    result.add("duplicate-write", (t.index,), f"value {value} written twice: {describe(i)}")
                    continue
                writer[value] = i
                writer_obj[value] = obj
                mine = appended.get((i, obj))
                if mine is None:
                    appended[(i, obj)] = mine = []
                    by_object[obj].append(i)
                    written_objects[i].append(obj)
                mine.append(value)
            elif kind == REG_WRITE:
                values, obj = tuple(op[3]), (op[1], op[2])
                if not values or values[-1] in reg_writer or values[-1] in writer:
                    result.add("duplicate-write", (t.index,), f"register write {values[-1:]} repeats: {describe(i)}")
                    continue
                reg_writer[values[-1]] = (i, obj, values)
                if (i, obj) not in reg_final:
                    reg_written[i].append(obj)
                reg_final[(i, obj)] = values[-1]

    # ---- reads: direct checks, and reads per object for the version orders
    observed = [False] * n
    set_reads: dict[tuple, list[tuple[int, frozenset]]] = defaultdict(list)  # object -> (reader, external set)
    reg_reads: list[tuple[int, tuple, object]] = []  # (reader, object, version value)
    reads_of: list[dict[tuple, frozenset | tuple]] = [{} for _ in range(n)]
    seen_writers: list[set[int]] = [set() for _ in range(n)]
    for i, t in enumerate(txns):
        if failed[i]:
            continue  # an aborted transaction's reads prove nothing
        own: dict[tuple, list] = defaultdict(list)
        own_reg: dict[tuple, tuple] = {}
        mine_all = {op[3] for op in t.ops if op[0] == APPEND}
        for op in t.ops:
            kind, obj = op[0], (op[1], op[2])
            if kind == APPEND:
                own[obj].append(op[3])
            elif kind == REG_WRITE:
                own_reg[obj] = tuple(op[3])
            elif kind == READ:
                read = set(op[3])
                external = read
                if mine_all:
                    mine = own.get(obj, ())
                    if any(v not in read for v in mine) or len(mine) < len(read & mine_all):
                        result.add("internal", (t.index,), f"{_obj(obj)} read {sorted(read)[:8]} with its own "
                                                            f"appends so far {mine}: {describe(i)}")
                    external = read - mine_all
                try:  # the common case at C speed: every value known, of this object, by live writers
                    owners = Counter(map(writer.__getitem__, external))
                    fast = all(map(obj.__eq__, map(writer_obj.__getitem__, external))) and not any(
                        failed[w] for w in owners)
                except KeyError:
                    fast = False
                if fast:
                    clean = external
                else:
                    owners = Counter()
                    clean = set()
                    for v in external:
                        w = writer.get(v)
                        if w is None or writer_obj[v] != obj:
                            result.add("garbage-read", (t.index,), f"{_obj(obj)} holds {v}, which no transaction "
                                                                   f"appended there: {describe(i)}")
                        elif failed[w]:
                            result.add("G1a", (txns[w].index, t.index),
                                       f"{describe(i)} read {v} on {_obj(obj)}, written by aborted {describe(w)}")
                        else:
                            owners[w] += 1
                            clean.add(v)
                for w, seen in owners.items():
                    observed[w] = True
                    total = len(appended[(w, obj)])
                    if seen != total:
                        result.add("G1b", (txns[w].index, t.index),
                                   f"{describe(i)} read {seen} of the {total} appends {describe(w)} made to {_obj(obj)}")
                    seen_writers[i].add(w)
                frozen = frozenset(clean)
                previous = reads_of[i].get(obj)
                if previous is None:
                    reads_of[i][obj] = frozen
                    set_reads[obj].append((i, frozen))
                elif previous != frozen:
                    result.add("non-repeatable-read", (t.index,),
                               f"{_obj(obj)} read twice, {sorted(previous)} then {sorted(frozen)}: {describe(i)}")
            elif kind == REG_READ:
                values = tuple(op[3])
                if obj in own_reg:
                    if values != own_reg[obj]:
                        result.add("internal", (t.index,), f"{_obj(obj)} read {values} after writing "
                                                            f"{own_reg[obj]}: {describe(i)}")
                    continue
                found = reg_writer.get(values[-1]) if values else None
                if found is None or found[1] != obj or found[2] != values:
                    result.add("garbage-read", (t.index,), f"register {_obj(obj)} read {values}, which no "
                                                           f"write produced: {describe(i)}")
                    continue
                w = found[0]
                if w == i:
                    result.add("internal", (t.index,), f"register {_obj(obj)} read {values} before writing it: "
                                                        f"{describe(i)}")
                    continue
                if failed[w]:
                    result.add("G1a", (txns[w].index, t.index),
                               f"{describe(i)} read {values[-1]} on {_obj(obj)}, written by aborted {describe(w)}")
                    continue
                if reg_final[(w, obj)] != values[-1]:
                    result.add("G1b", (txns[w].index, t.index),
                               f"{describe(i)} read {values} on {_obj(obj)}, an intermediate write of {describe(w)}")
                    continue
                observed[w] = True
                seen_writers[i].add(w)
                previous = reads_of[i].get(obj)
                if previous is None:
                    reads_of[i][obj] = values
                    reg_reads.append((i, obj, values[-1]))
                elif previous != values:
                    result.add("non-repeatable-read", (t.index,),
                               f"register {_obj(obj)} read twice, {previous} then {values}: {describe(i)}")

    live = [committed[i] or (observed[i] and not failed[i]) for i in range(n)]
    graph = _Graph()

    # ---- registers: the version tree (parent = the value before the last), lost updates, edges
    children: dict[object, list[int]] = defaultdict(list)  # version -> live txns whose write follows it
    parent_of: dict[object, object] = {}
    for value, (w, obj, values) in reg_writer.items():
        parent = values[-2] if len(values) >= 2 else None
        parent_of[value] = parent
        if not live[w] or parent is None:
            continue
        found = reg_writer.get(parent)
        if found is None or found[1] != obj:
            result.add("garbage-read", (txns[w].index,), f"register {_obj(obj)} written as {values}, after a "
                                                         f"version nobody wrote: {describe(w)}")
            continue
        if found[0] != w:
            children[parent].append(w)
            graph.add(found[0], w, "ww", obj)
    for parent, kids in children.items():
        if len(kids) > 1:
            obj = reg_writer[parent][1]
            result.add("lost-update", tuple(txns[k].index for k in kids),
                       f"{len(kids)} committed transactions overwrote version {parent} of {_obj(obj)}: "
                       + "; ".join(describe(k) for k in kids[:3]))
    depth: dict[object, int] = {}
    for value in reg_writer:
        chain: list[object] = []
        node: object = value
        while node is not None and node not in depth and len(chain) <= len(reg_writer):
            chain.append(node)
            node = parent_of.get(node)
        base = depth.get(node, -1) if node is not None else -1
        for k, item in enumerate(reversed(chain)):
            depth[item] = base + 1 + k
    for r, obj, value in reg_reads:
        graph.add(reg_writer[value][0], r, "wr", obj)
        for k in children.get(value, ()):
            graph.add(r, k, "rw", obj)

    # ---- set objects: the chain of reads, its layers, wr edges (rw edges are kept as layers)
    rw_later: list[tuple[int, tuple, list[list[int]], list[int | None], int]] = []
    for obj in set(set_reads) | set(by_object):
        reads = sorted(set_reads.get(obj, ()), key=lambda item: len(item[1]))
        ordered = True
        for (r1, s1), (r2, s2) in zip(reads, reads[1:]):
            if not s1 <= s2:
                ordered = False
                result.add("incompatible-order", (txns[r1].index, txns[r2].index),
                           f"{_obj(obj)} read as {sorted(s1)[:8]} and as {sorted(s2)[:8]}, neither containing the "
                           f"other: {describe(r1)} and {describe(r2)}")
                break
        for r, s in reads:
            for w in {writer[v] for v in s}:
                graph.add(w, r, "wr", obj)
        if not ordered:
            # No layers: each read gets its own rw edges (quadratic, but only for a broken object).
            all_values = [v for w in by_object.get(obj, ()) if live[w] for v in appended[(w, obj)]]
            for r, s in reads:
                for w in {writer[v] for v in all_values if v not in s}:
                    graph.add(r, w, "rw", obj)
            continue
        layer_of: dict[object, int] = {}
        seen: frozenset = frozenset()
        layer = 0
        read_layer: list[int] = []
        for _, s in reads:
            if len(s) > len(seen):
                layer += 1
                for v in s - seen:
                    layer_of[v] = layer
                seen = s
            read_layer.append(layer)
        last = layer + 1
        layers: list[list[int]] = [[] for _ in range(last + 1)]
        for w in by_object.get(obj, ()):
            if live[w]:
                layers[min(layer_of.get(v, last) for v in appended[(w, obj)])].append(w)
        least: list[int | None] = [None] * (last + 2)  # least csn in layers >= j
        for j in range(last, -1, -1):
            csns = [txns[w].csn for w in layers[j] if txns[w].csn is not None]
            below, here = least[j + 1], (min(csns) if csns else None)
            least[j] = here if below is None else (below if here is None else min(here, below))
        has_later = [False] * (last + 2)
        for j in range(last, -1, -1):
            has_later[j] = has_later[j + 1] or bool(layers[j])
        for (r, _), at in zip(reads, read_layer):
            if has_later[at + 1]:
                rw_later.append((r, obj, layers, least, at))

    # ---- fractured reads: R saw some of W's writes and missed others on objects R read
    for r in range(n):
        if failed[r]:
            continue
        for w in seen_writers[r]:
            for obj in written_objects.get(w, ()):
                got = reads_of[r].get(obj)
                if isinstance(got, frozenset):
                    missing = [v for v in appended[(w, obj)] if v not in got]
                    if missing and len(missing) == len(appended[(w, obj)]):
                        result.add("fractured-read", (txns[w].index, txns[r].index),
                                   f"{describe(r)} saw writes of {describe(w)} but not its appends {missing} to "
                                   f"{_obj(obj)}")
            for obj in reg_written.get(w, ()):
                got = reads_of[r].get(obj)
                if isinstance(got, tuple) and depth.get(got[-1], -1) < depth.get(reg_final[(w, obj)], -1):
                    result.add("fractured-read", (txns[w].index, txns[r].index),
                               f"{describe(r)} saw writes of {describe(w)} but read {_obj(obj)} as {list(got)}, "
                               f"older than its write")

    # ---- lost writes: acknowledged appends absent from the final read
    for f in (i for i in range(n) if txns[i].final):
        for (w, obj), values in appended.items():
            got = reads_of[f].get(obj)
            if committed[w] and got is not None:
                missing = [v for v in values if v not in got]
                if missing:
                    result.add("lost-write", (txns[w].index,), f"{describe(w)} committed {missing} to "
                                                                f"{_obj(obj)}, absent from the final read")

    # ---- G0 and G1c: cycles of ww/wr edges
    dependency = graph.adjacency({"ww", "wr"}, n)
    component = _strong_components(n, dependency, graph.dst)
    groups: dict[int, list[int]] = defaultdict(list)
    for i, c in enumerate(component):
        groups[c].append(i)
    writes_only = graph.adjacency({"ww"}, n)
    for members in (m for m in groups.values() if len(m) > 1):
        inside = set(members)
        local_id = {i: k for k, i in enumerate(members)}
        local_dst = [local_id.get(d, -1) for d in graph.dst]
        local = _strong_components(len(members), [[e for e in writes_only[i] if graph.dst[e] in inside]
                                                  for i in members], local_dst)
        sizes: dict[int, int] = defaultdict(int)
        for c in local:
            sizes[c] += 1
        cyclic = [k for k, c in enumerate(local) if sizes[c] > 1]
        if cyclic:
            part = {members[k] for k, c in enumerate(local) if c == local[cyclic[0]]}
            cycle = _cycle_through(graph, writes_only, members[cyclic[0]], lambda x, s=part: x in s)
            result.add("G0", tuple(name[i] for i in members[:10]),
                       f"write-write cycle {_show_cycle(graph, cycle, txns)}; " + _members(members, describe))
        else:
            cycle = _cycle_through(graph, dependency, members[0], lambda x, s=inside: x in s)
            result.add("G1c", tuple(name[i] for i in members[:10]),
                       f"write-read cycle {_show_cycle(graph, cycle, txns)}; " + _members(members, describe))

    # ---- G-single: one rw edge R -> W closed by a ww/wr path W ~> R
    certified, reason = _certificate(graph, txns)
    result.stats["certificate"] = "held" if certified else f"failed ({reason})"
    candidates: list[tuple[int, int, tuple]] = []  # (reader, writer, object of the rw edge)
    if certified:
        for r, obj, layers, least, at in rw_later:
            snapshot = txns[r].snapshot
            if snapshot is None or least[at + 1] is None or least[at + 1] > snapshot:  # type: ignore[operator]
                continue
            for j in range(at + 1, len(layers)):
                for w in layers[j]:
                    if txns[w].csn is not None and txns[w].csn <= snapshot:
                        candidates.append((r, w, obj))
        for e, kind in enumerate(graph.kind):
            if kind == "rw":
                r, w = graph.src[e], graph.dst[e]
                if txns[w].csn is not None and txns[r].snapshot is not None and txns[w].csn <= txns[r].snapshot:
                    candidates.append((r, w, graph.obj[e]))
    else:
        for r, obj, layers, _, at in rw_later:
            for j in range(at + 1, len(layers)):
                for w in layers[j]:
                    graph.add(r, w, "rw", obj)
        whole = _strong_components(n, graph.adjacency({"ww", "wr", "rw"}, n), graph.dst)
        candidates = [(graph.src[e], graph.dst[e], graph.obj[e]) for e, kind in enumerate(graph.kind)
                      if kind == "rw" and whole[graph.src[e]] == whole[graph.dst[e]]]
    result.stats["G-single candidates"] = len(candidates)
    searched = 0
    reported: set[tuple[int, int]] = set()
    for r, w, obj in dict.fromkeys(candidates):
        if (r, w) in reported:
            continue
        if searched >= MAX_SEARCHES:
            result.stats["G-single candidates not searched"] = len(candidates) - searched
            break
        searched += 1
        snapshot = txns[r].snapshot
        path = _path(graph, dependency, w, r, _committed_by(txns, snapshot) if certified else None)
        if path is None:
            continue
        reported.add((r, w))
        if len(path) == 1 and w in seen_writers[r]:
            continue  # R saw some of W's writes and missed this one: a fractured read, reported above
        into_reader = graph.obj[path[-1]]
        kind = "read-skew" if into_reader[0] != obj[0] else "G-single"
        result.add(kind, (name[r], name[w]),
                   f"{describe(r)} missed the write of {describe(w)} to {_obj(obj)} yet depends on it: "
                   f"{_show_cycle(graph, path, txns)} -rw({_obj(obj)})-> T{name[w]}")
    result.stats.update(transactions=n, committed=sum(committed), edges=len(graph.src), searched=searched)
    return result


def _committed_by(txns: Sequence[Txn], snapshot: int | None) -> object:
    """With the certificate, only transactions committed at or before `snapshot` lie on a path into
    a reader at `snapshot`."""
    if snapshot is None:
        return None

    def allowed(node: int) -> bool:
        csn = txns[node].csn
        return csn is not None and csn <= snapshot

    return allowed


def _certificate(graph: _Graph, txns: Sequence[Txn]) -> tuple[bool, str]:
    """Whether the recorded timestamps order every ww/wr edge (csn(A) ≤ snapshot(B)) and every writer
    (snapshot < csn): then a ww/wr path W ⇝ R implies csn(W) ≤ snapshot(R)."""
    for e, kind in enumerate(graph.kind):
        if kind == "rw":
            continue
        a, b = txns[graph.src[e]], txns[graph.dst[e]]
        if a.csn is None or b.snapshot is None or a.csn > b.snapshot:
            return False, f"edge T{a.index} -{kind}-> T{b.index}: csn {a.csn}, snapshot {b.snapshot}"
        if a.snapshot is None or a.snapshot >= a.csn:
            return False, f"T{a.index}: snapshot {a.snapshot}, csn {a.csn}"
    return True, ""


def _cycle_through(graph: _Graph, out: list[list[int]], start: int, allowed: object) -> list[int]:
    for e in out[start]:
        nxt = graph.dst[e]
        if not allowed(nxt):  # type: ignore[operator]
            continue
        back = _path(graph, out, nxt, start, allowed)
        if back is not None:
            return [e, *back]
    return []


def _show(op: tuple) -> str:
    kind, table, key, value = op
    if kind in (READ, REG_READ):
        values = sorted(value) if kind == READ else list(value)
        text = ",".join(str(v) for v in values[:6]) + (",..." if len(values) > 6 else "")
        return f"{kind}({table}:{key})=[{text}]"
    if kind == REG_WRITE:
        return f"w({table}:{key})<-[{','.join(str(v) for v in value)}]"
    return f"a({table}:{key})<-{value}"


def _obj(obj: tuple) -> str:
    return f"{obj[0]}:{obj[1]}"


def _show_cycle(graph: _Graph, edges: list[int], txns: Sequence[Txn]) -> str:
    if not edges:
        return "(none)"
    text = f"T{txns[graph.src[edges[0]]].index}"
    for e in edges:
        text += f" -{graph.kind[e]}({_obj(graph.obj[e])})-> T{txns[graph.dst[e]].index}"
    return text


def _members(members: list[int], describe: object) -> str:
    shown = "; ".join(describe(i) for i in members[:4])  # type: ignore[operator]
    return f"{len(members)} transactions, e.g. {shown}"


def main(argv: list[str]) -> int:
    """python -m tests.history HISTORY.jsonl ...: check saved histories, print what was found."""
    bad = 0
    for path in argv:
        result = check(load(Path(path)))
        print(f"{path}: {result.report()}")
        bad += result.total
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
