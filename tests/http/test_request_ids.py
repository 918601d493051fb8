"""Request ids (http/call.py, RandomIds): 64 random bits each, drawn from os.urandom a pool
at a time (issue 23), and never the same in a forked worker as in its parent."""

from __future__ import annotations

import os
import re

from reflexguard.http.call import RandomIds


def test_ids_are_sixteen_hex_digits_and_distinct_across_pools() -> None:
    ids = RandomIds()
    drawn = [ids.next() for _ in range(3 * RandomIds.POOL + 7)]
    assert all(re.fullmatch(r"[0-9a-f]{16}", i) for i in drawn)
    assert len(set(drawn)) == len(drawn)


def test_a_forked_child_draws_its_own_ids() -> None:
    ids = RandomIds()
    ids.next()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's side
        os.write(write, ids.next().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    theirs = os.read(read, 64).decode()
    os.close(read)
    assert re.fullmatch(r"[0-9a-f]{16}", theirs)
    assert theirs != ids.next()
