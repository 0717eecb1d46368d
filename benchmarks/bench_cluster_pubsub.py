"""PUBLISH vs SPUBLISH on a 3-primary Redis Cluster: what a hot-key notification costs.

Plain PUBLISH on a cluster is forwarded over the cluster bus to every node, which then
delivers it to its own subscribers; SPUBLISH (Redis >= 7, ``--sharded-pubsub``) stays
on the shard that owns the channel's slot. One publisher sends ``--messages`` messages of
``--size`` bytes (a daemon notification is ~0.2-2 KB) to one subscriber, in pipelined
batches, each mode ``--repeats`` times on a fresh cluster; the script prints medians of
the CPU seconds all nodes used, the cluster-bus messages sent, and the publisher's
throughput, and the PUBLISH / SPUBLISH ratio of each.

    python benchmarks/bench_cluster_pubsub.py               # 50,000 x 512 B, 3 repeats
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

from redis.cluster import RedisCluster

from hotkeyd.testing import RedisClusterServers

CHANNEL = "hotkeyd:events"


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _bus_sent(cluster: RedisClusterServers) -> int:
    import redis

    total = 0
    for node in cluster.nodes:
        with redis.Redis(port=node.port, decode_responses=True) as r:
            for line in str(r.execute_command("CLUSTER", "INFO")).splitlines():
                if line.startswith("cluster_stats_messages_sent:"):
                    total += int(line.split(":")[1])
    return total


def run_once(sharded: bool, messages: int, size: int) -> dict[str, float]:
    with RedisClusterServers(primaries=3) as cluster:
        rc = RedisCluster.from_url(cluster.url, socket_timeout=60)
        sub = rc.pubsub()
        if sharded:
            sub.ssubscribe(CHANNEL)
        else:
            sub.subscribe(CHANNEL)
        got = 0
        failed: list[BaseException] = []
        done = threading.Event()

        def receive() -> None:
            nonlocal got
            try:
                while got < messages:
                    # blocking reads: a timeout in the middle of a reply would lose it
                    m = sub.get_sharded_message(timeout=None) if sharded else sub.get_message(None)
                    if m and m["type"] in ("message", "smessage"):
                        got += 1
            except BaseException as exc:  # reported by the publisher side
                failed.append(exc)
            done.set()

        t = threading.Thread(target=receive, daemon=True)
        t.start()
        time.sleep(0.3)
        pids = [n.proc.pid for n in cluster.nodes if n.proc is not None]
        cpu0, bus0 = sum(map(_cpu_seconds, pids)), _bus_sent(cluster)
        node = rc.get_node_from_key(CHANNEL) if sharded else rc.get_default_node()
        assert node is not None
        target = rc.get_redis_connection(node)
        payload = b"x" * size
        command = "SPUBLISH" if sharded else "PUBLISH"
        t0 = time.perf_counter()
        for start in range(0, messages, 100):
            pipe = target.pipeline(transaction=False)
            for _ in range(min(100, messages - start)):
                pipe.execute_command(command, CHANNEL, payload)
            pipe.execute()
            while got < start - 1000 and not done.is_set():  # within its output buffer
                time.sleep(0.0005)
        done.wait(120)
        elapsed = time.perf_counter() - t0
        cpu = sum(map(_cpu_seconds, pids)) - cpu0
        bus = _bus_sent(cluster) - bus0
        sub.close()
        rc.close()
        assert got == messages, f"subscriber got {got} of {messages}: {failed}"
        return {"cpu_s": cpu, "bus_msgs": float(bus), "msgs_per_s": messages / elapsed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"PUBLISH": [], "SPUBLISH": []}
    for _ in range(args.repeats):  # interleaved, so load drift hits both alike
        runs["PUBLISH"].append(run_once(False, args.messages, args.size))
        runs["SPUBLISH"].append(run_once(True, args.messages, args.size))
    med = {
        mode: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for mode, rs in runs.items()
    }
    print(
        f"3-primary cluster, {args.messages} messages x {args.size} B, "
        f"median of {args.repeats} runs\n"
    )
    print("| mode | node CPU s (all 3) | cluster-bus messages | publisher msgs/s |")
    print("| --- | ---: | ---: | ---: |")
    for mode, m in med.items():
        print(f"| {mode} | {m['cpu_s']:.2f} | {m['bus_msgs']:.0f} | {m['msgs_per_s']:,.0f} |")
    p, s = med["PUBLISH"], med["SPUBLISH"]
    print(
        f"| PUBLISH / SPUBLISH | {p['cpu_s'] / max(s['cpu_s'], 1e-9):.2f}x | "
        f"{p['bus_msgs'] / max(s['bus_msgs'], 1.0):.0f}x | "
        f"{p['msgs_per_s'] / s['msgs_per_s']:.2f}x |"
    )


if __name__ == "__main__":
    main()
