package colo.peers.common;

/**
 * A user's totals, as colo's sample counts them ({@code UserStats}), and
 * as {@code colo produce --expected} writes what they must reach.
 */
public record Totals(long purchases, long items, long amountSpent, long lastSequence, long outOfSequence) {
    public static final Totals NONE = new Totals(0, 0, 0, 0, 0);

    /** The totals after one more event; one whose sequence does not follow counts as out of sequence. */
    public Totals add(PurchaseEvent event) {
        long outOfOrder = event.sequence() == lastSequence + 1 ? 0 : 1;
        return new Totals(
                purchases + 1,
                items + event.quantity(),
                amountSpent + event.quantity() * event.price(),
                event.sequence(),
                outOfSequence + outOfOrder);
    }

    /** As colo's sample answers them, field names included. */
    public String json() {
        return String.format(
                "{\"purchases\":%d,\"items\":%d,\"amount_spent\":%d,\"last_sequence\":%d,\"out_of_sequence\":%d}",
                purchases, items, amountSpent, lastSequence, outOfSequence);
    }
}
