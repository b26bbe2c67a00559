"""The open connections of one server and who makes room when it is full.

A newcomer is never refused. At the connection limit one connection goes: one lingering after an error
answer if there is one; else one of the peer address holding the most connections — its longest idle
keep-alive connection, else its oldest unfinished one. Over the byte budget for unfinished requests, the
oldest unfinished connection of the address holding the most of those bytes goes. So a client that opens
connections and never finishes a request only ever displaces its own, and a kubelet probing from the
node's address with one connection at a time (or kube-scheduler with its few keep-alive ones) always gets
in: that is the room reserved for probes. Pure bookkeeping (no I/O); the server closes whatever `evict`
is called on.
"""

from __future__ import annotations

from typing import Protocol


class Entry(Protocol):
    peer: str  # the client's address
    started: float  # when its current request (or, before the first, the connection) began
    idle_since: float
    buffered: int  # bytes of unfinished requests it holds

    def lingering(self) -> bool: ...

    def idle(self) -> bool: ...

    def evict(self, reason: str) -> None: ...


class ConnectionTable:
    def __init__(self, max_connections: int, max_buffered_bytes: int) -> None:
        self.max_connections = max_connections
        self.max_buffered_bytes = max_buffered_bytes
        self.entries: dict[Entry, None] = {}  # insertion-ordered set
        self.buffered = 0
        self.evicted = 0

    def __len__(self) -> int:
        return len(self.entries)

    def admit(self, entry: Entry) -> None:
        """Add `entry`; at the limit another connection makes room."""
        self.entries[entry] = None
        while len(self.entries) > self.max_connections:
            victim = self.victim(spare=entry)
            if victim is None:
                break
            self._evict(victim, "the server is at its connection limit")

    def remove(self, entry: Entry) -> None:
        if entry in self.entries:
            del self.entries[entry]
            self.buffered -= entry.buffered
            entry.buffered = 0

    def grow(self, entry: Entry, size: int) -> bool:
        """`entry` now holds `size` bytes of unfinished requests. Over the budget, other connections make
        room; False when only `entry` itself could (it must then be answered and closed)."""
        self.buffered += size - entry.buffered
        entry.buffered = size
        while self.buffered > self.max_buffered_bytes:
            victim = self.victim(spare=entry, holding_bytes=True)
            if victim is None:
                return False
            self._evict(victim, "the server's memory for unfinished requests is full")
        return True

    def _evict(self, victim: Entry, reason: str) -> None:
        self.remove(victim)
        self.evicted += 1
        victim.evict(reason)

    def victim(self, spare: Entry, holding_bytes: bool = False) -> Entry | None:
        """Who goes to make room (never `spare`); None when nobody else is there. With `holding_bytes`,
        only connections holding unfinished bytes count (evicting others frees no memory)."""
        others = [e for e in self.entries if e is not spare and (e.buffered or not holding_bytes)]
        if not others:
            return None
        lingering = [e for e in others if e.lingering()]
        if lingering:
            return min(lingering, key=lambda e: e.started)
        by_peer: dict[str, list[Entry]] = {}
        for e in others:
            by_peer.setdefault(e.peer, []).append(e)

        def weight(group: list[Entry]) -> tuple[int, float]:
            held = sum(e.buffered for e in group) if holding_bytes else len(group)
            return held, -min(e.started for e in group)  # ties: the address with the oldest connection

        crowd = max(by_peer.values(), key=weight)
        idle = [e for e in crowd if e.idle()]
        if idle:
            return min(idle, key=lambda e: e.idle_since)
        return min(crowd, key=lambda e: e.started)
