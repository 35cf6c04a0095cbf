package colo.peers.pekko;

/** Messages between nodes: serialized with Jackson's CBOR (application.conf). */
public interface CborSerializable {}
