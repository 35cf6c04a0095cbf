package colo.peers.pekko;

import colo.peers.common.Progress;
import colo.peers.common.PurchaseEvent;
import colo.peers.common.Totals;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import com.typesafe.config.Config;
import com.typesafe.config.ConfigFactory;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.pekko.Done;
import org.apache.pekko.actor.typed.ActorSystem;
import org.apache.pekko.actor.typed.javadsl.Behaviors;
import org.apache.pekko.cluster.sharding.external.ExternalShardAllocationStrategy;
import org.apache.pekko.cluster.sharding.typed.javadsl.ClusterSharding;
import org.apache.pekko.cluster.sharding.typed.javadsl.Entity;
import org.apache.pekko.kafka.CommitterSettings;
import org.apache.pekko.kafka.ConsumerSettings;
import org.apache.pekko.kafka.Subscriptions;
import org.apache.pekko.kafka.javadsl.Committer;
import org.apache.pekko.kafka.javadsl.Consumer;
import org.apache.pekko.stream.RestartSettings;
import org.apache.pekko.stream.javadsl.RestartSource;
import org.apache.pekko.stream.javadsl.Sink;

/**
 * The sample's per-user totals in Apache Pekko, after the kafka-to-sharding
 * sample: the consumer's partitions decide where their shards live
 * (external shard allocation), each record is an ask to its user's entity,
 * and its offset is committed, in batches, once the entity answered (at
 * least once; the entity's totals are in memory). A user's totals answer
 * {@code GET /users/<id>}.
 *
 * <p>Settings come from the environment: PEER_BOOTSTRAP, PEER_TOPIC,
 * PEER_PARTITIONS, PEER_PORT (this node's remoting port), PEER_SEEDS (the
 * seed nodes' ports, comma-separated, the first starting first),
 * PEER_HTTP_PORT, PEER_PARALLELISM (asks in flight: the sample's 20),
 * PEER_GROUP (the consumer group: the entity type's name by default),
 * PEER_SESSION_TIMEOUT_MS (the consumer's, for a run that shortens it for
 * every system alike). Records handled, their latency and each partition's
 * first and last record answer {@code GET /metrics}.
 */
public final class PurchaseTotals {
    private static final Duration ASK = Duration.ofSeconds(5);

    private PurchaseTotals() {}

    static String env(String name, String otherwise) {
        String value = System.getenv(name);
        return value == null || value.isEmpty() ? otherwise : value;
    }

    public static void main(String[] args) throws IOException {
        String port = env("PEER_PORT", "7345");
        List<String> seeds = new ArrayList<>();
        for (String seed : env("PEER_SEEDS", port).split(",")) {
            seeds.add("\"pekko://colo-peer@127.0.0.1:" + seed.trim() + "\"");
        }
        Config config = ConfigFactory.parseString(
                        "pekko.remote.artery.canonical.port = " + port + "\n"
                                + "pekko.cluster.seed-nodes = [" + String.join(",", seeds) + "]\n")
                .withFallback(ConfigFactory.load());
        ActorSystem<Void> system = ActorSystem.create(Behaviors.empty(), "colo-peer", config);

        int partitions = Integer.parseInt(env("PEER_PARTITIONS", "12"));
        ClusterSharding sharding = ClusterSharding.get(system);
        sharding.init(Entity.of(User.TYPE, context -> User.create())
                .withMessageExtractor(new Sharding.Extractor(partitions))
                .withAllocationStrategy(
                        ExternalShardAllocationStrategy.create(system, User.TYPE.name(), Sharding.allocationTimeout())));

        ConsumerSettings<String, byte[]> consumer = ConsumerSettings.create(
                        system, new StringDeserializer(), new ByteArrayDeserializer())
                .withBootstrapServers(env("PEER_BOOTSTRAP", "127.0.0.1:9092"))
                // The entity type's name, as the sample recommends, unless
                // a run names a group of its own.
                .withGroupId(env("PEER_GROUP", User.TYPE.name()))
                .withProperty(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        String session = env("PEER_SESSION_TIMEOUT_MS", "");
        if (!session.isEmpty()) {
            consumer = consumer.withProperty(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, session);
        }
        int parallelism = Integer.parseInt(env("PEER_PARALLELISM", "20"));
        ConsumerSettings<String, byte[]> settings = consumer;
        // An ask that fails (its entity's node died, say) fails the
        // stream: restarted with a backoff, as Pekko Connectors Kafka's
        // error handling recommends, from the committed offsets.
        AtomicReference<Consumer.Control> control = new AtomicReference<>(Consumer.createNoopControl());
        RestartSource.onFailuresWithBackoff(
                        RestartSettings.create(Duration.ofSeconds(1), Duration.ofSeconds(10), 0.2),
                        () -> Consumer.sourceWithOffsetContext(
                                        settings,
                                        Subscriptions.topics(env("PEER_TOPIC", "user-events"))
                                                .withPartitionAssignmentHandler(new Sharding.FollowPartitions(system)))
                                .mapMaterializedValue(started -> {
                                    control.set(started);
                                    return started;
                                })
                                .mapAsync(parallelism, record -> handle(
                                        sharding, record.value(), record.partition(), record.timestamp()))
                                .via(Committer.flowWithOffsetContext(CommitterSettings.create(system)))
                                .asSource())
                .runWith(Sink.ignore(), system);

        HttpServer server = HttpServer.create(
                new InetSocketAddress("127.0.0.1", Integer.parseInt(env("PEER_HTTP_PORT", "8091"))), 0);
        server.setExecutor(Executors.newFixedThreadPool(2));
        server.createContext("/users/", exchange -> answer(sharding, exchange));
        server.createContext("/metrics", Progress::serve);
        server.start();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            control.get().shutdown().toCompletableFuture().join();
            system.terminate();
            system.getWhenTerminated().toCompletableFuture().join();
            // Last: what it handled until it stopped can still be read.
            server.stop(0);
        }));
    }

    /** A record: asked of its user's entity (an event that does not decode adds nothing). */
    static CompletionStage<Done> handle(ClusterSharding sharding, byte[] payload, int partition, long timestamp) {
        PurchaseEvent event = PurchaseEvent.decode(payload);
        if (event == null) {
            return CompletableFuture.completedFuture(Done.getInstance());
        }
        return sharding.entityRefFor(User.TYPE, event.userId())
                .ask(replyTo -> new User.Purchase(event, partition, timestamp, replyTo), ASK);
    }

    static void answer(ClusterSharding sharding, HttpExchange exchange) throws IOException {
        String user = exchange.getRequestURI().getPath().substring("/users/".length());
        int status;
        String body;
        try {
            Totals totals = sharding.entityRefFor(User.TYPE, user)
                    .<Totals>ask(replyTo -> new User.Get(user, replyTo), ASK)
                    .toCompletableFuture()
                    .join();
            status = 200;
            body = totals.json();
        } catch (RuntimeException e) {
            status = 503;
            body = "{\"error\":\"" + e.getClass().getSimpleName() + "\"}";
        }
        byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
        exchange.getResponseHeaders().add("Content-Type", "application/json");
        exchange.sendResponseHeaders(status, bytes.length);
        try (OutputStream out = exchange.getResponseBody()) {
            out.write(bytes);
        }
    }
}
