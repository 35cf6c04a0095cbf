package colo.peers.streams;

import colo.peers.common.Progress;
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
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.InvalidStateStoreException;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
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
 * PEER_THREADS, PEER_STATE_DIR, PEER_HTTP_PORT, PEER_SESSION_TIMEOUT_MS (the
 * consumer's, for a run that shortens it for every system alike). Records
 * handled, their latency and each partition's first and last record answer
 * {@code GET /metrics}.
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

    /** An event's payload with where it came from. */
    record Stamped(byte[] payload, int partition, long timestamp) {}

    /** Stamps each event; a task's start is its partition's assignment here. */
    static final class Stamp implements FixedKeyProcessor<String, byte[], Stamped> {
        private FixedKeyProcessorContext<String, Stamped> context;
        private int partition;

        @Override
        public void init(FixedKeyProcessorContext<String, Stamped> context) {
            this.context = context;
            this.partition = context.taskId().partition();
            Progress.GLOBAL.assigned(partition);
        }

        @Override
        public void process(FixedKeyRecord<String, byte[]> record) {
            context.forward(record.withValue(new Stamped(record.value(), partition, record.timestamp())));
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
        String session = env("PEER_SESSION_TIMEOUT_MS", "");
        if (!session.isEmpty()) {
            props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), session);
        }
        // One broker: its internal topics have one replica.
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, "1");

        Serde<Totals> totals = new TotalsSerde();
        StreamsBuilder builder = new StreamsBuilder();
        // Grouped by the record's key, the user id, as it comes: no
        // repartition topic. An event that does not decode adds nothing
        // (colo dead-letters it; its count is not compared).
        // Each event goes with its partition and timestamp to the
        // aggregator, which reports it handled (Progress) as it updates its
        // user's totals: no serde, as nothing is repartitioned.
        builder.stream(topic, Consumed.with(Serdes.String(), Serdes.ByteArray()))
                .processValues(Stamp::new)
                .groupByKey()
                .aggregate(
                        () -> Totals.NONE,
                        (user, stamped, sum) -> {
                            PurchaseEvent event = PurchaseEvent.decode(stamped.payload());
                            Totals next = event == null ? sum : sum.add(event);
                            Progress.GLOBAL.handled(stamped.partition(), stamped.timestamp());
                            return next;
                        },
                        Materialized.<String, Totals, KeyValueStore<Bytes, byte[]>>as(STORE)
                                .withKeySerde(Serdes.String())
                                .withValueSerde(totals));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        HttpServer server = HttpServer.create(
                new InetSocketAddress("127.0.0.1", Integer.parseInt(env("PEER_HTTP_PORT", "8090"))), 0);
        server.setExecutor(Executors.newFixedThreadPool(2));
        server.createContext("/users/", exchange -> answer(streams, exchange));
        server.createContext("/metrics", Progress::serve);
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            // Leaving the group as it closes (KIP-812's option): without
            // it, Kafka Streams keeps its membership, and its partitions
            // move only once its session times out.
            streams.close(CloseOptions.groupMembershipOperation(CloseOptions.GroupMembershipOperation.LEAVE_GROUP)
                    .withTimeout(Duration.ofSeconds(10)));
            // Last: what it handled until it closed can still be read.
            server.stop(0);
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
