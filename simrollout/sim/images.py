"""Task images on the hosts of a fleet: a per-host LRU cache and a pull link.

A sandbox of task image ``m`` on host ``h`` starts when ``m`` is on ``h``: at once when cached, else
after a pull at the host's bandwidth that starts when the pulls queued before it on that link are
done. A sandbox of an image already being pulled waits for that pull (no second transfer). Every
answer is closed-form at the moment of the create, so both fidelities see the same pulls.

>>> c = HostImages(hosts=1, sizes_gb=[1.0, 1.0], pull_mb_s=1024.0, cache_gb=1.5)
>>> c.ready(0, 0, now=0.0), c.ready(0, 0, now=0.5), c.ready(0, 1, now=0.5)
(1.0, 0.5, 1.5)
>>> c.ready(0, 0, now=3.0)  # evicted by image 1 (the cache holds one of them): pulled again
1.0
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np


class HostImages:
    def __init__(self, hosts: int, sizes_gb, pull_mb_s: float, cache_gb: float):
        self.sizes = np.asarray(sizes_gb, dtype=float)
        self.seconds_per_gb = 1024.0 / pull_mb_s
        self.cache_gb = cache_gb
        self.cached: list[OrderedDict[int, float]] = [OrderedDict() for _ in range(hosts)]  # image -> ready
        self.used = [0.0] * hosts
        self.link_free = [0.0] * hosts
        self.requests = self.hits = self.pulls = self.evictions = 0
        self.pulled_gb = self.wait_seconds = 0.0

    def has(self, host: int, image: int) -> bool:
        return image in self.cached[host]

    def ready(self, host: int, image: int, now: float) -> float:
        """Seconds until ``image`` is on ``host`` (0 when cached and pulled), pulling it on a miss."""
        self.requests += 1
        cache = self.cached[host]
        if image in cache:
            cache.move_to_end(image)
            wait = max(0.0, cache[image] - now)
            self.hits += wait == 0.0
        else:
            size = float(self.sizes[image])
            done = max(now, self.link_free[host]) + size * self.seconds_per_gb
            self.link_free[host] = done
            cache[image] = done
            self.used[host] += size
            self.pulls += 1
            self.pulled_gb += size
            while self.used[host] > self.cache_gb and len(cache) > 1:
                old, _ = cache.popitem(last=False)
                self.used[host] -= float(self.sizes[old])
                self.evictions += 1
            wait = done - now
        self.wait_seconds += wait
        return wait

    def summary(self) -> dict:
        return {
            "image_pulls": self.pulls,
            "image_hit_rate": self.hits / self.requests if self.requests else 0.0,
            "image_pulled_gb": self.pulled_gb,
            "image_evictions": self.evictions,
            "image_wait_hours": self.wait_seconds / 3600,
        }
