"""A least-recently-used cache bounded by its number of entries and by their total weight.

The caches a long-lived process keeps per run, per version or per schema (the scheduler's
and workers' folded runs, compiled versions, schema validators) are bounded both ways: a
count alone lets a few huge entries (a run with 100,000 events, a megabyte of LWIR) take
all the memory. ``weigh`` gives an entry's approximate weight (bytes, usually); it is asked
when the entry is stored, each time it is :meth:`touched <LruCache.move_to_end>`, and once
more when the next other entry is stored or touched (by then its use is usually over: a run
caught up and folded), so an entry that grows while in use (a run folding new events) is
weighed as it is now.

Past either bound the least recently used entries go first, but never the one just stored
or touched: one entry heavier than the whole budget stays (alone) while it is in use, rather
than being built again on every use.

The interface is the part of :class:`collections.OrderedDict` those caches use (``get``,
``[key] = value``, ``move_to_end``, ``pop``, ``popitem(last=False)``, iteration oldest
first), so a cache swaps in without changing its callers. Not thread-safe: callers that
share one across threads hold their own lock, as they did around the ``OrderedDict``.
Pure: no IO.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any, Final, Generic, TypeVar, overload

__all__ = ["LruCache", "TextKeyedCache"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
D = TypeVar("D")
_MISSING: Final[Any] = object()


class LruCache(Generic[K, V]):
    """See the module docstring. ``max_weight=None``: bounded by count alone."""

    def __init__(
        self,
        max_items: int,
        max_weight: int | None = None,
        weigh: Callable[[V], int] | None = None,
    ) -> None:
        if max_items < 1:
            raise ValueError(f"max_items must be at least 1, got {max_items!r}")
        self.max_items = max_items
        self.max_weight = max_weight
        self._weigh = weigh
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._total = 0
        self._last: K | None = None  # the entry stored or touched last

    @property
    def weight(self) -> int:
        """The entries' total weight, as last weighed."""
        return self._total

    def _weight_of(self, value: V) -> int:
        return self._weigh(value) if self._weigh is not None else 0

    def _reweigh(self, key: K) -> None:
        found = self._entries.get(key)
        if found is None or self._weigh is None:
            return
        value, weight = found
        now = self._weigh(value)
        if now != weight:
            self._entries[key] = (value, now)  # (keeps its place)
            self._total += now - weight

    def _using(self, key: K) -> None:
        """``key`` is the entry in use now: the one used before it is weighed again."""
        if self._weigh is None:
            return
        last = self._last
        if last is not None and last != key:
            self._reweigh(last)
        self._last = key

    def _trim(self) -> None:
        """Drop the oldest entries past either bound, keeping the newest one."""
        entries = self._entries
        limit = self.max_weight
        while len(entries) > 1 and (
            len(entries) > self.max_items or (limit is not None and self._total > limit)
        ):
            _, (_, weight) = entries.popitem(last=False)
            self._total -= weight

    @overload
    def get(self, key: K) -> V | None: ...

    @overload
    def get(self, key: K, default: D) -> V | D: ...

    def get(self, key: K, default: V | D | None = None) -> V | D | None:
        """The entry (``default`` if absent), without marking it used."""
        found = self._entries.get(key)
        return default if found is None else found[0]

    def __getitem__(self, key: K) -> V:
        return self._entries[key][0]

    def __setitem__(self, key: K, value: V) -> None:
        """Store ``value`` as the most recently used entry (then trim the others)."""
        self.put(key, value)

    def put(self, key: K, value: V, weight: int | None = None) -> None:
        """``cache[key] = value``, with ``weight`` as its weight when given (a cache without
        ``weigh`` then keeps it: entries whose weight is known once, when stored)."""
        self._using(key)
        if weight is None:
            weight = self._weight_of(value)
        old = self._entries.pop(key, None)
        if old is not None:
            self._total -= old[1]
        self._entries[key] = (value, weight)
        self._total += weight
        self._trim()

    def move_to_end(self, key: K) -> None:
        """Mark ``key`` used: the most recent entry, weighed again (then trim the others)."""
        self._entries.move_to_end(key)
        if self._weigh is None:
            return  # (weights that do not change: nothing new to trim)
        self._using(key)
        self._reweigh(key)
        self._trim()

    @overload
    def pop(self, key: K) -> V: ...

    @overload
    def pop(self, key: K, default: D) -> V | D: ...

    def pop(self, key: K, default: Any = _MISSING) -> Any:
        if key not in self._entries:
            if default is _MISSING:
                raise KeyError(key)
            return default
        value, weight = self._entries.pop(key)
        self._total -= weight
        return value

    def popitem(self, last: bool = True) -> tuple[K, V]:
        key, (value, weight) = self._entries.popitem(last=last)
        self._total -= weight
        return key, value

    def clear(self) -> None:
        self._entries.clear()
        self._total = 0
        self._last = None

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[K]:
        """The keys, least recently used first."""
        return iter(self._entries)

    def values(self) -> Iterator[V]:
        return (value for value, _ in self._entries.values())


class TextKeyedCache(Generic[V]):
    """Values built from a text key (a schema's canonical JSON, say), bounded by count and
    by the keys' total length; thread-safe.

    A hit reads without the lock and without reordering (the entries are immutable once
    built, and the oldest go first), so the hot path costs what a ``dict`` lookup does; a
    miss builds outside the lock (two threads may build the same value once each).
    """

    def __init__(self, max_items: int, max_chars: int) -> None:
        self._entries: LruCache[str, tuple[V, int]] = LruCache(
            max_items, max_chars, weigh=_key_length
        )
        self._lock = threading.Lock()

    def get_or_build(self, key: str, build: Callable[[], V]) -> V:
        found = self._entries.get(key)
        if found is not None:
            return found[0]
        value = build()
        with self._lock:
            self._entries[key] = (value, len(key))
        return value

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def chars(self) -> int:
        """The cached keys' total length."""
        return self._entries.weight


def _key_length(entry: tuple[Any, int]) -> int:
    return entry[1]
