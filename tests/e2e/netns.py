"""Two "hosts" on this machine: Linux network namespaces, each with its own address on one veth
pair (10.213.0.1 and 10.213.0.2, nothing else but loopback), for the multi-host tests
(test_hosts.py) and bench/dist_bench.py --slow-link. Needs root (CAP_NET_ADMIN) and iproute2;
TwoHosts.create() raises unittest.SkipTest saying why when they cannot be made."""
import json
import os
import shutil
import subprocess
import unittest

SUBNET = "10.213.0"
MASTER = f"{SUBNET}.1"      # host A: the rendezvous
WORKER = f"{SUBNET}.2"      # host B


def ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def tc(*args, check=True):
    return subprocess.run(["tc", *args], capture_output=True, text=True, check=check, timeout=30)


def first_line(text):
    return (text.strip().splitlines() or [""])[0]


class TwoHosts:
    """Namespaces NS[0] (address MASTER) and NS[1] (WORKER) joined by veth VETH[0] <-> VETH[1];
    names carry this process's id, so that concurrent runs do not meet."""

    def __init__(self):
        tag = f"{os.getpid()}"
        self.ns = [f"bigbatch-{tag}-a", f"bigbatch-{tag}-b"]
        self.veth = [f"bbh{tag}a", f"bbh{tag}b"]  # at most 15 characters
        self.addr = [MASTER, WORKER]
        self.created = []

    def create(self):
        """Builds both hosts, or raises unittest.SkipTest saying why they cannot be built here."""
        if shutil.which("ip") is None:
            raise unittest.SkipTest("no 'ip' command (iproute2): cannot make network namespaces")
        try:
            for ns in self.ns:
                result = ip("netns", "add", ns, check=False)
                if result.returncode != 0:
                    raise unittest.SkipTest(f"cannot create network namespaces (needs root or CAP_NET_ADMIN): "
                                            f"ip netns add: {first_line(result.stderr)}")
                self.created.append(ns)
            result = ip("link", "add", self.veth[0], "type", "veth", "peer", "name", self.veth[1], check=False)
            if result.returncode != 0:
                raise unittest.SkipTest(f"cannot create a veth pair: {first_line(result.stderr)}")
            for ns, veth, addr in zip(self.ns, self.veth, self.addr):
                ip("link", "set", veth, "netns", ns)
                ip("-n", ns, "addr", "add", f"{addr}/24", "dev", veth)
                ip("-n", ns, "link", "set", "lo", "up")
                ip("-n", ns, "link", "set", veth, "up")
        except BaseException:
            self.remove()
            raise

    def remove(self):
        for ns in self.created:  # the veth pair goes with its namespaces
            ip("netns", "del", ns, check=False)
        ip("link", "del", self.veth[0], check=False)  # if it never reached a namespace
        self.created = []

    def link(self, state):
        ip("-n", self.ns[0], "link", "set", self.veth[0], state)

    def tx_bytes(self, host):
        stats = json.loads(ip("-n", self.ns[host], "-j", "-s", "link", "show", "dev", self.veth[host]).stdout)
        return stats[0]["stats64"]["tx"]["bytes"]

    def slow_link(self, rate):
        """Shapes both ends to `rate` (tc's tbf: "10mbit"); returns why it could not, or None.
        (netem's delay would be the closer model of distance, but this kernel lacks it.)"""
        if shutil.which("tc") is None:
            return "no 'tc' command (iproute2): cannot slow the link"
        shaped = [tc("-n", ns, "qdisc", "add", "dev", veth, "root", "tbf", "rate", rate, "burst", "32kbit",
                     "latency", "1s", check=False) for ns, veth in zip(self.ns, self.veth)]
        if any(r.returncode != 0 for r in shaped):
            self.fast_link()
            return "no tbf qdisc to slow the link: " + first_line(shaped[0].stderr + shaped[1].stderr)
        return None

    def fast_link(self):
        for ns, veth in zip(self.ns, self.veth):
            tc("-n", ns, "qdisc", "del", "dev", veth, "root", check=False)

    def held_back(self):
        """Packets host A's shaper held back so far (tbf's overlimits)."""
        stats = json.loads(tc("-n", self.ns[0], "-s", "-j", "qdisc", "show", "dev", self.veth[0]).stdout)
        return stats[0]["overlimits"]


def two_hosts_for(what):
    """Two hosts built, for a benchmark's `what` (a flag); SystemExit saying why they cannot be."""
    hosts = TwoHosts()
    try:
        hosts.create()
    except unittest.SkipTest as why:
        raise SystemExit(f"{what} needs two network namespaces: {why}") from None
    return hosts
