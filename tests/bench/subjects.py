"""Micro-benchmark of jetraft.protocol: SubjectIndex insert/match rates and ClientParser throughput.

Run by hand: ``.venv/bin/python tests/bench/subjects.py [--quick]``. Not collected by
pytest (the name does not start with ``test_``); nothing here is asserted on timing.
Absolute numbers on a shared machine are noise: compare runs on the same machine.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

from jetraft.protocol import ClientParser, SubjectIndex, encode_msg

PAYLOAD_SIZE = 128
CHUNK = 64 * 1024  # what a socket read typically returns under load


def best_of(repeat: int, fn: Callable[[], int]) -> tuple[float, int]:
    """Run ``fn`` (which returns an operation count) ``repeat`` times; the fastest wall time and the count."""
    best = float("inf")
    count = 0
    for _ in range(repeat):
        start = time.perf_counter()
        count = fn()
        best = min(best, time.perf_counter() - start)
    return best, count


def subscription_subjects(n: int, rng: random.Random) -> list[str]:
    """A service-like mix: 90% literal four-token subjects, 10% wildcard ones."""
    subjects = []
    for i in range(n):
        if i % 10 == 0:
            subjects.append(rng.choice([f"app.{i % 50}.*.events", f"_INBOX.{i:022d}.*", f"app.{i % 50}.>"]))
        else:
            subjects.append(f"app.{i % 50}.inst{i}.events")
    return subjects


def bench_index(n: int, repeat: int) -> dict[str, float]:
    rng = random.Random(n)
    subjects = subscription_subjects(n, rng)

    def insert() -> int:
        index: SubjectIndex[int] = SubjectIndex()
        for i, subject in enumerate(subjects):
            index.insert(subject, i)
        return n

    insert_time, _ = best_of(repeat, insert)
    index: SubjectIndex[int] = SubjectIndex()
    for i, subject in enumerate(subjects):
        index.insert(subject, i)
    # Cold: more distinct subjects than the cache holds, so most lookups walk the trie.
    cold = [f"app.{rng.randrange(50)}.inst{rng.randrange(n)}.events" for _ in range(20_000)]
    hot = cold[:100]

    def match_cold() -> int:
        match = index.match
        for subject in cold:
            match(subject)
        return len(cold)

    def match_hot() -> int:
        match = index.match
        for _ in range(200):
            for subject in hot:
                match(subject)
        return 200 * len(hot)

    cold_time, cold_count = best_of(repeat, match_cold)
    hot_time, hot_count = best_of(repeat, match_hot)

    def remove() -> int:
        for i, subject in enumerate(subjects):
            index.remove(subject, i)
        return n

    remove_time, _ = best_of(1, remove)
    return {
        "insert/s": n / insert_time,
        "remove/s": n / remove_time,
        "match cold/s": cold_count / cold_time,
        "match cached/s": hot_count / hot_time,
    }


def bench_parser(messages: int, repeat: int) -> dict[str, float]:
    payload = b"x" * PAYLOAD_SIZE
    one = b"PUB bench.subject  %d\r\n%b\r\n" % (PAYLOAD_SIZE, payload)  # nats-py's form, no reply
    stream = one * messages
    chunks = [stream[i : i + CHUNK] for i in range(0, len(stream), CHUNK)]

    def parse() -> int:
        parser = ClientParser()
        count = 0
        for chunk in chunks:
            count += len(parser.feed(chunk))
        return count

    elapsed, count = best_of(repeat, parse)
    assert count == messages, "every PUB must come out"  # a correctness guard, not a timing check

    def encode() -> int:
        for i in range(messages):
            encode_msg("bench.subject", "1", None, payload)
        return messages

    enc_time, _ = best_of(repeat, encode)
    return {
        "parse msgs/s": count / elapsed,
        "parse MB/s": len(stream) / elapsed / 1e6,
        "encode_msg msgs/s": messages / enc_time,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, one repetition")
    args = parser.parse_args()
    repeat = 1 if args.quick else 3
    sizes = (1_000, 10_000) if args.quick else (1_000, 10_000, 100_000)

    print(f"SubjectIndex (best of {repeat}; 90% literal, 10% wildcard subscriptions)")
    print(f"{'subscriptions':>14} {'insert/s':>12} {'remove/s':>12} {'match cold/s':>14} {'match cached/s':>15}")
    for n in sizes:
        r = bench_index(n, repeat)
        print(f"{n:>14,} {r['insert/s']:>12,.0f} {r['remove/s']:>12,.0f} "
              f"{r['match cold/s']:>14,.0f} {r['match cached/s']:>15,.0f}")

    messages = 50_000 if args.quick else 200_000
    r = bench_parser(messages, repeat)
    print(f"\nClientParser ({messages:,} x PUB with {PAYLOAD_SIZE}-byte payload, {CHUNK // 1024} KiB feeds)")
    print(f"{'msgs/s':>12} {'MB/s':>8} {'encode_msg/s':>14}")
    print(f"{r['parse msgs/s']:>12,.0f} {r['parse MB/s']:>8.1f} {r['encode_msg msgs/s']:>14,.0f}")


if __name__ == "__main__":
    main()
