package colo.peers.common;

import com.google.protobuf.CodedInputStream;
import java.io.IOException;

/**
 * The fields of the sample's protobuf {@code PurchaseEvent}
 * ({@code proto/proto/colo/v1/purchases.proto}) that the totals need, read
 * field by field: five scalar fields need no generated code.
 */
public record PurchaseEvent(String userId, long quantity, long price, long sequence) {
    /** The event, or null if the payload is not one colo would take (it dead-letters those). */
    public static PurchaseEvent decode(byte[] payload) {
        if (payload == null) {
            return null;
        }
        try {
            CodedInputStream in = CodedInputStream.newInstance(payload);
            String user = "";
            long quantity = 0;
            long price = 0;
            long sequence = 0;
            while (true) {
                int tag = in.readTag();
                switch (tag >>> 3) {
                    case 0 -> {
                        return user.isEmpty() || quantity == 0 || price < 0
                                ? null
                                : new PurchaseEvent(user, quantity, price, sequence);
                    }
                    case 1 -> user = in.readString();
                    case 3 -> quantity = in.readUInt32() & 0xffffffffL;
                    case 4 -> price = in.readInt64();
                    case 5 -> sequence = in.readUInt64();
                    default -> in.skipField(tag);
                }
            }
        } catch (IOException e) {
            return null;
        }
    }
}
