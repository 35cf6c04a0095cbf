package colo.peers.pekko;

import colo.peers.common.Progress;
import colo.peers.common.PurchaseEvent;
import colo.peers.common.Totals;
import org.apache.pekko.Done;
import org.apache.pekko.actor.typed.ActorRef;
import org.apache.pekko.actor.typed.Behavior;
import org.apache.pekko.actor.typed.javadsl.Behaviors;
import org.apache.pekko.cluster.sharding.typed.javadsl.EntityTypeKey;

/**
 * A user's entity: its totals in memory, as the kafka-to-sharding sample
 * keeps them (nothing is persisted: a moved or restarted entity starts at
 * zero, and the records already committed are not read again).
 */
public final class User {
    public static final EntityTypeKey<Command> TYPE = EntityTypeKey.create(Command.class, "user");

    private User() {}

    public sealed interface Command extends CborSerializable permits Purchase, Get {
        String userId();
    }

    /** One purchase event, from its record's partition and timestamp; answered once added. */
    public record Purchase(PurchaseEvent event, int partition, long timestamp, ActorRef<Done> replyTo)
            implements Command {
        @Override
        public String userId() {
            return event.userId();
        }
    }

    /** Asks the totals. */
    public record Get(String userId, ActorRef<Totals> replyTo) implements Command {}

    public static Behavior<Command> create() {
        return running(Totals.NONE);
    }

    private static Behavior<Command> running(Totals totals) {
        return Behaviors.receiveMessage(command -> {
            if (command instanceof Purchase purchase) {
                Totals next = totals.add(purchase.event());
                Progress.GLOBAL.handled(purchase.partition(), purchase.timestamp());
                purchase.replyTo().tell(Done.getInstance());
                return running(next);
            }
            if (command instanceof Get get) {
                get.replyTo().tell(totals);
            }
            return Behaviors.same();
        });
    }
}
