package colo.peers.streams;

import colo.peers.common.PurchaseEvent;
import colo.peers.common.Totals;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.InvalidStateStoreException;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;

/**
 * The sample's per-user totals in Kafka Streams: each purchase event (the
 * sample's protobuf PurchaseEvent, keyed by user id) adds to its user's
 * purchases, items and amount, in a RocksDB store with its changelog, as
 * Kafka Streams' documentation builds an aggregation. A user's totals are
 * asked over HTTP, {@code GET /users/<id>}, for the benchmark's checker.
 *
 * <p>Settings come from the environment, each with Kafka Streams' own
 * default where it has one: PEER_BOOTSTRAP, PEER_TOPIC, PEER_APPLICATION_ID,
 * PEER_GUARANTEE ({@code exactly_once_v2} or {@code at_least_once}),
 * PEER_THREADS, PEER_STATE_DIR, PEER_HTTP_PORT.
 */
public final class PurchaseTotals {
    static final String STORE = "user-totals";

    private PurchaseTotals() {}

    /** Totals as five longs: a value Kafka Streams stores and logs. */
    static final class TotalsSerde implements Serde<Totals> {
        @Override
        public Serializer<Totals> serializer() {
            return (topic, totals) -> ByteBuffer.allocate(40)
                    .putLong(totals.purchases())
                    .putLong(totals.items())
                    .putLong(totals.amountSpent())
                    .putLong(totals.lastSequence())
                    .putLong(totals.outOfSequence())
                    .array();
        }

        @Override
        public Deserializer<Totals> deserializer() {
            return (topic, bytes) -> {
                if (bytes == null) {
                    return null;
                }
                ByteBuffer in = ByteBuffer.wrap(bytes);
                return new Totals(in.getLong(), in.getLong(), in.getLong(), in.getLong(), in.getLong());
            };
        }
    }

    static String env(String name, String otherwise) {
        String value = System.getenv(name);
        return value == null || value.isEmpty() ? otherwise : value;
    }

    public static void main(String[] args) throws IOException, InterruptedException {
        String topic = env("PEER_TOPIC", "user-events");
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, env("PEER_APPLICATION_ID", "kafka-streams-peer"));
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, env("PEER_BOOTSTRAP", "127.0.0.1:9092"));
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, env("PEER_GUARANTEE", StreamsConfig.EXACTLY_ONCE_V2));
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, env("PEER_THREADS", "1"));
        props.put(StreamsConfig.STATE_DIR_CONFIG, env("PEER_STATE_DIR", "/tmp/kafka-streams"));
        // One broker: its internal topics have one replica.
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, "1");

        Serde<Totals> totals = new TotalsSerde();
        StreamsBuilder builder = new StreamsBuilder();
        // Grouped by the record's key, the user id, as it comes: no
        // repartition topic. An event that does not decode adds nothing
        // (colo dead-letters it; its count is not compared).
        builder.stream(topic, Consumed.with(Serdes.String(), Serdes.ByteArray()))
                .groupByKey(Grouped.with(Serdes.String(), Serdes.ByteArray()))
                .aggregate(
                        () -> Totals.NONE,
                        (user, payload, sum) -> {
                            PurchaseEvent event = PurchaseEvent.decode(payload);
                            return event == null ? sum : sum.add(event);
                        },
                        Materialized.<String, Totals, KeyValueStore<Bytes, byte[]>>as(STORE)
                                .withKeySerde(Serdes.String())
                                .withValueSerde(totals));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        HttpServer server = HttpServer.create(
                new InetSocketAddress("127.0.0.1", Integer.parseInt(env("PEER_HTTP_PORT", "8090"))), 0);
        server.setExecutor(Executors.newFixedThreadPool(2));
        server.createContext("/users/", exchange -> answer(streams, exchange));
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            server.stop(0);
            streams.close(Duration.ofSeconds(10));
            stopped.countDown();
        }));
        streams.start();
        server.start();
        stopped.await();
    }

    /** A user's totals, or 503 while the store cannot be read (not running yet). */
    static void answer(KafkaStreams streams, HttpExchange exchange) throws IOException {
        String user = exchange.getRequestURI().getPath().substring("/users/".length());
        int status;
        String body;
        try {
            ReadOnlyKeyValueStore<String, Totals> store = streams.store(
                    StoreQueryParameters.fromNameAndType(STORE, QueryableStoreTypes.keyValueStore()));
            Totals found = store.get(user);
            status = 200;
            body = (found == null ? Totals.NONE : found).json();
        } catch (InvalidStateStoreException e) {
            status = 503;
            body = "{\"error\":\"" + streams.state() + "\"}";
        }
        byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
        exchange.getResponseHeaders().add("Content-Type", "application/json");
        exchange.sendResponseHeaders(status, bytes.length);
        try (OutputStream out = exchange.getResponseBody()) {
            out.write(bytes);
        }
    }
}
