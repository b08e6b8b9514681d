"""``cached``: :func:`functools.cached_property` without its lock.

On Python 3.11, ``functools.cached_property`` computes a value under one ``RLock`` per
property, shared by every instance of the class: all threads of a worker computing the
payload of their own events queued on the same lock (a tenth of the fleet worker's path in
a profile). Python 3.12 dropped the lock; this is that behaviour on 3.11 too. Two threads
may compute the same instance's value at once; both get a value, the last one stays.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

__all__ = ["cached"]

T = TypeVar("T")


class cached(Generic[T]):
    """A property computed on first access and kept in the instance's ``__dict__`` (where
    later accesses find it without calling anything); works on frozen dataclasses."""

    def __init__(self, func: Callable[[Any], T]) -> None:
        self.func = func
        self.name = func.__name__
        self.__doc__ = func.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> cached[T]: ...

    @overload
    def __get__(self, instance: object, owner: type | None = None) -> T: ...

    def __get__(self, instance: object | None, owner: type | None = None) -> T | cached[T]:
        if instance is None:
            return self
        value = self.func(instance)
        instance.__dict__[self.name] = value
        return value
