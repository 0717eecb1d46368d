package io.hotkeyd;

/**
 * What the daemon's watch did for one cache: heartbeats heard and rejected, epoch changes
 * (every copy dropped), reads the watch did not vouch for ({@code lapsed}), of those the ones
 * strict mode sent to Redis ({@code strictMisses}), and the invalidation intake's counters.
 */
public record WatchStats(
    long heartbeats,
    long badHeartbeats,
    long epochChanges,
    long lapsed,
    long strictMisses,
    long unwatchedCopies,
    long invalidationsApplied,
    long invalidationsDeferred,
    long invalidationsOversized,
    long invalidationsUnsigned,
    long invalidationsBad) {}
