"""Who makes room in a full server (kgwe.httpd.table), on plain data: a newcomer is never refused, and the
address holding the most connections gives one up, so a kubelet's single probe connection or
kube-scheduler's few keep-alive ones are never what an attacker's flood pushes out."""

from __future__ import annotations

from dataclasses import dataclass, field

from kgwe.httpd.table import ConnectionTable


@dataclass(eq=False)
class Conn:
    peer: str
    started: float
    idle_since: float = 0.0
    buffered: int = 0
    is_idle: bool = False
    is_lingering: bool = False
    evicted: list[str] = field(default_factory=list)

    def lingering(self) -> bool:
        return self.is_lingering

    def idle(self) -> bool:
        return self.is_idle

    def evict(self, reason: str) -> None:
        self.evicted.append(reason)


def test_a_newcomer_is_admitted_and_the_busiest_address_pays() -> None:
    table = ConnectionTable(max_connections=4, max_buffered_bytes=1 << 20)
    kubelet = Conn("10.0.0.1", started=0.0)
    scheduler = Conn("10.0.0.2", started=1.0, is_idle=True, idle_since=1.0)  # idle keep-alive
    flood = [Conn("10.1.1.1", started=2.0 + i) for i in range(2)]
    for c in (kubelet, scheduler, *flood):
        table.admit(c)
    newcomer = Conn("10.1.1.1", started=9.0)
    table.admit(newcomer)
    assert flood[0].evicted and not (kubelet.evicted or scheduler.evicted or newcomer.evicted)
    probe = Conn("10.0.0.1", started=10.0)  # the kubelet's next probe while the flood holds two
    table.admit(probe)
    assert flood[1].evicted and len(table) == 4 and probe in table.entries


def test_lingering_then_idle_of_the_busiest_address_go_first() -> None:
    table = ConnectionTable(max_connections=3, max_buffered_bytes=1 << 20)
    done = Conn("10.0.0.9", started=5.0, is_lingering=True)
    busy = [Conn("10.1.1.1", started=0.0), Conn("10.1.1.1", started=1.0, is_idle=True, idle_since=3.0)]
    for c in (*busy, done):
        table.admit(c)
    table.admit(Conn("10.0.0.1", started=6.0))
    assert done.evicted and not busy[0].evicted
    table.admit(Conn("10.0.0.2", started=7.0))
    assert busy[1].evicted and not busy[0].evicted  # its idle one before its unfinished one


def test_the_byte_budget_takes_from_the_address_holding_the_most() -> None:
    table = ConnectionTable(max_connections=10, max_buffered_bytes=1000)
    big = [Conn("10.1.1.1", started=float(i)) for i in range(3)]
    small = Conn("10.0.0.2", started=-1.0)
    for c in (small, *big):
        table.admit(c)
    assert table.grow(small, 100)
    for c in big:
        assert table.grow(c, 250)
    assert table.buffered == 850
    assert table.grow(small, 400)  # 1,150 > 1,000: the oldest of the heaviest address goes
    assert big[0].evicted and not small.evicted and table.buffered == 900
    lone = ConnectionTable(max_connections=10, max_buffered_bytes=1000)
    only = Conn("10.0.0.3", started=0.0)
    lone.admit(only)
    assert not lone.grow(only, 2000)  # nobody else to take from: the caller answers it 503
