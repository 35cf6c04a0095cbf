package colo.peers.common;

import com.sun.net.httpserver.HttpExchange;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.DoubleAdder;
import java.util.concurrent.atomic.LongAdder;

/**
 * What the benchmark reads off a peer as it handles records, as colo's
 * metrics give it for colo: each record's latency (its Kafka timestamp to
 * the moment its totals were updated), records handled, and when this
 * process handled each partition's first record since the partition was
 * assigned here and its last one (a move pauses from the old owner's last
 * to the new owner's first). Served in Prometheus' text format on
 * {@code GET /metrics}, with colo's latency buckets, so that every system's
 * percentiles are read off the same bounds.
 */
public final class Progress {
    /** colo's {@code RECORD_LATENCY_BUCKETS}, in seconds. */
    static final double[] BUCKETS = {
        0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15,
        0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0,
    };
    /** Partitions a topic may have here; more than any run uses. */
    static final int PARTITIONS = 4096;

    public static final Progress GLOBAL = new Progress();

    private final LongAdder handled = new LongAdder();
    private final LongAdder[] buckets = new LongAdder[BUCKETS.length + 1];
    private final LongAdder latencies = new LongAdder();
    private final DoubleAdder latencySum = new DoubleAdder();
    /** Milliseconds since the epoch; 0 for none yet. */
    private final AtomicLongArray first = new AtomicLongArray(PARTITIONS);
    private final AtomicLongArray last = new AtomicLongArray(PARTITIONS);
    /** Partitions ever handled here, for the series to show. */
    private final AtomicLongArray seen = new AtomicLongArray(PARTITIONS);

    private Progress() {
        for (int i = 0; i < buckets.length; i++) {
            buckets[i] = new LongAdder();
        }
    }

    /** The partition was assigned here: its next record is its first. */
    public void assigned(int partition) {
        if (partition >= 0 && partition < PARTITIONS) {
            first.set(partition, 0);
        }
    }

    /** A record of {@code partition}, produced at {@code timestamp} (ms), has updated its user's totals. */
    public void handled(int partition, long timestamp) {
        long now = System.currentTimeMillis();
        handled.increment();
        if (timestamp > 0) {
            double seconds = Math.max(0, now - timestamp) / 1000.0;
            int at = 0;
            while (at < BUCKETS.length && seconds > BUCKETS[at]) {
                at++;
            }
            buckets[at].increment();
            latencies.increment();
            latencySum.add(seconds);
        }
        if (partition >= 0 && partition < PARTITIONS) {
            first.compareAndSet(partition, 0, now);
            last.set(partition, now);
            seen.lazySet(partition, 1);
        }
    }

    /** The figures, in Prometheus' text format. */
    public String render() {
        StringBuilder out = new StringBuilder();
        out.append("peer_records_handled_total ").append(handled.sum()).append('\n');
        long cumulative = 0;
        for (int i = 0; i < BUCKETS.length; i++) {
            cumulative += buckets[i].sum();
            out.append("peer_record_latency_seconds_bucket{le=\"").append(BUCKETS[i]).append("\"} ")
                    .append(cumulative).append('\n');
        }
        cumulative += buckets[BUCKETS.length].sum();
        out.append("peer_record_latency_seconds_bucket{le=\"+Inf\"} ").append(cumulative).append('\n');
        out.append("peer_record_latency_seconds_sum ").append(latencySum.sum()).append('\n');
        out.append("peer_record_latency_seconds_count ").append(latencies.sum()).append('\n');
        for (int p = 0; p < PARTITIONS; p++) {
            if (seen.get(p) == 0) {
                continue;
            }
            out.append("peer_partition_first_handled_timestamp_seconds{partition=\"").append(p).append("\"} ")
                    .append(first.get(p) / 1000.0).append('\n');
            out.append("peer_partition_last_handled_timestamp_seconds{partition=\"").append(p).append("\"} ")
                    .append(last.get(p) / 1000.0).append('\n');
        }
        return out.toString();
    }

    /** Answers {@code GET /metrics}. */
    public static void serve(HttpExchange exchange) throws IOException {
        byte[] bytes = GLOBAL.render().getBytes(StandardCharsets.UTF_8);
        exchange.getResponseHeaders().add("Content-Type", "text/plain; version=0.0.4");
        exchange.sendResponseHeaders(200, bytes.length);
        try (OutputStream out = exchange.getResponseBody()) {
            out.write(bytes);
        }
    }
}
