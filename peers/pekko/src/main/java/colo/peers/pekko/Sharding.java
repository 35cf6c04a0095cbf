package colo.peers.pekko;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import colo.peers.common.Progress;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.utils.Utils;
import org.apache.pekko.actor.Address;
import org.apache.pekko.actor.typed.ActorSystem;
import org.apache.pekko.cluster.sharding.external.ExternalShardAllocation;
import org.apache.pekko.cluster.sharding.external.javadsl.ExternalShardAllocationClient;
import org.apache.pekko.cluster.sharding.typed.ShardingMessageExtractor;
import org.apache.pekko.cluster.typed.Cluster;
import org.apache.pekko.kafka.RestrictedConsumer;
import org.apache.pekko.kafka.javadsl.PartitionAssignmentHandler;

/**
 * What Pekko Connectors Kafka's cluster-sharding module gives (not on this
 * machine's Maven mirror), written out: a user's shard is its key's Kafka
 * partition, as the Java client's default partitioner places it, and a
 * partition assigned to this node's consumer moves its shard here through
 * the external shard allocation, so that records are handled where they
 * are consumed.
 */
final class Sharding {
    private Sharding() {}

    /** Shard = the key's murmur2 partition, as Kafka's Java producer computes it. */
    static final class Extractor extends ShardingMessageExtractor<User.Command, User.Command> {
        private final int partitions;

        Extractor(int partitions) {
            this.partitions = partitions;
        }

        @Override
        public String entityId(User.Command message) {
            return message.userId();
        }

        @Override
        public String shardId(String entityId) {
            byte[] key = entityId.getBytes(StandardCharsets.UTF_8);
            return Integer.toString(Utils.toPositive(Utils.murmur2(key)) % partitions);
        }

        @Override
        public User.Command unwrapMessage(User.Command message) {
            return message;
        }
    }

    /** On each assignment, this node is where its partitions' shards live. */
    static final class FollowPartitions implements PartitionAssignmentHandler {
        private final ExternalShardAllocationClient client;
        private final Address self;
        private final ActorSystem<?> system;

        FollowPartitions(ActorSystem<?> system) {
            this.system = system;
            this.client = ExternalShardAllocation.get(system).getClient(User.TYPE.name());
            this.self = Cluster.get(system).selfMember().address();
        }

        @Override
        public void onAssign(Set<TopicPartition> assigned, RestrictedConsumer consumer) {
            Map<String, Address> locations = new HashMap<>();
            for (TopicPartition partition : assigned) {
                Progress.GLOBAL.assigned(partition.partition());
                locations.put(Integer.toString(partition.partition()), self);
            }
            client.setShardLocations(locations).whenComplete((done, error) -> {
                if (error != null) {
                    system.log().warn("shard locations not updated: {}", error.toString());
                }
            });
        }

        @Override
        public void onRevoke(Set<TopicPartition> revoked, RestrictedConsumer consumer) {}

        @Override
        public void onLost(Set<TopicPartition> lost, RestrictedConsumer consumer) {}

        @Override
        public void onStop(Set<TopicPartition> current, RestrictedConsumer consumer) {}
    }

    static Duration allocationTimeout() {
        return Duration.ofSeconds(5);
    }
}
