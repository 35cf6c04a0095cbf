"""Produces records with confluent-kafka for Python, configured with nothing
but the brokers: its default partitioner is librdkafka's consistent_random
(a CRC32 of the key), not Kafka's murmur2.

Reads one record a line from standard input, `<key>\t<payload in hex>`,
sends each to the topic named by the second argument, waits until the
broker acknowledged every one, and exits non-zero if one failed.

    python3 produce_with_defaults.py <bootstrap servers> <topic> < records
"""

import sys

from confluent_kafka import Producer


def main() -> int:
    bootstrap, topic = sys.argv[1], sys.argv[2]
    producer = Producer({"bootstrap.servers": bootstrap})
    failed = []

    def delivered(err, msg):
        if err is not None:
            failed.append(f"{msg.key()!r}: {err}")

    sent = 0
    for line in sys.stdin:
        key, payload = line.rstrip("\n").split("\t")
        while True:
            try:
                producer.produce(topic, key=key, value=bytes.fromhex(payload), on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        sent += 1
    left = producer.flush(60)
    if left or failed:
        print(f"{left} records unacknowledged, {len(failed)} failed: {failed[:5]}", file=sys.stderr)
        return 1
    print(f"{sent} records sent")
    return 0


if __name__ == "__main__":
    sys.exit(main())
