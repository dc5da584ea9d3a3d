// A link's own rate, measured between two ranks whose link carries nothing else (DiLoCo's
// auto probes beside inner steps that do not use it): what crosses the wire per second, not
// counting latency, the peer's reply or the peer's compute; one direction at a time, or both
// at once (Duplex, below).
//
// The round trip comes from 8-byte pings whose receives are posted ahead (Gloo sends a
// message only once its receive's notice has arrived: pings posted as they go cost two round
// trips each, and read a 5 ms link's one-way delay as 10 ms). The rate comes from trains:
// eight messages back to back, every receive posted first, the receiver timing the arrivals
// after the first message, so neither its latency nor a window's ramp (TCP's slow start on a
// long link, a token bucket's burst on a fast one) counts. A lost packet makes the messages
// behind it complete late and together, so the rate is the lowest read from each start in
// the first half to the last arrival. A train whose second half took less than 10 ms or a
// round trip is sent again larger (32 MiB at most): 512 KiB is long enough on a 20 Mbit/s
// link, a 1 Gbit/s one needs 4 MiB; on a round trip of 100 ms or more the first train is
// 2 MiB, in pieces striped over the link's connections (one connection's slow start took
// seconds). What holds a train back (slow start, a loss, a descheduled process) only makes
// it read low, so each direction's rate is the best of two trains long enough to be read (at
// most four trains); on a round trip of 100 ms or more, where each train costs a second, one
// suffices if a train before it opened the window. After each train the peer reports what it
// received and the initiator answers with what comes next: one round trip a train. Both ends call
// it with the same tags; only the initiator's result is filled in.
#pragma once

namespace dtrain::comm {

class Group;

struct LinkProbe {
  double out_bytes_per_s = 0;  // initiator -> peer
  double in_bytes_per_s = 0;   // peer -> initiator
  double latency_s = 0;        // one way
};

// kOneWayAtATime times each direction alone; kBothWaysAtOnce sends both at the same time,
// in about half the time, as a ring all-reduce uses the link (a link whose directions share
// capacity reads slower, as it then is for that traffic); a link the first round reads at
// 5 Gbit/s or more (loopback: a memory copy, where both ways measure the copying cores) has
// its scaled rounds timed one way at a time.
enum class Duplex { kOneWayAtATime, kBothWaysAtOnce };

// Pings cost five round trips (a second on a 100 ms link; more on a link under 5 ms, where
// they go on for 20 ms, at most 32). kFromGroup takes the round trip the group holds
// (Group::round_trip, the same at both ends: measured at connect, or refreshed just before by
// refresh_short_round_trips_from_rank0 below) instead of pinging, where it holds one.
enum class RoundTrip { kMeasure, kFromGroup };

LinkProbe probe_link(Group& group, int peer, bool initiator, int ping_tag, int data_tag,
                     Duplex duplex = Duplex::kOneWayAtATime,
                     RoundTrip round_trip = RoundTrip::kMeasure);

// The slowest directed link between rank 0 and each other rank, probed with
// Duplex::kBothWaysAtOnce (as an all-reduce uses its links). Collective: every rank calls
// it; the result is rank 0's (the other ranks get the defaults).
struct SlowestLink {
  int src = 0, dst = 0;
  double rate_bytes_per_s = 1e30;  // the slowest direction's
  double latency_s = 0;            // that link's, one way
  double longest_latency_s = 0;    // the longest of every link's
};
SlowestLink probe_slowest_from_rank0(Group& group, int ping_tag, int data_tag,
                                     RoundTrip round_trip = RoundTrip::kMeasure);

// Collective: the links between rank 0 and each other rank whose round trip the group holds
// as under 10 ms, or not at all, are pinged and the lesser reading kept (ranks still starting
// can slow the pings at connect; longer ones are kept as read, as their pings would cost a
// second). For a probe soon after connect that wants its pings on a quiet link: with
// RoundTrip::kFromGroup the probe's trains can then go beside other traffic (DiLoCo's first
// exchanges), where pings would read the queue behind it.
void refresh_short_round_trips_from_rank0(Group& group, int ping_tag);

// The round trip alone (the least of the pings above; both ranks call it and get the
// initiator's), and half of it.
double probe_round_trip(Group& group, int peer, bool initiator, int ping_tag);
double probe_latency(Group& group, int peer, bool initiator, int ping_tag);

// Collective: every pair of ranks measures its round trip (in rounds where each rank meets
// one other) and both keep the lower rank's measurement (Group::round_trip).
void measure_round_trips(Group& group);

// Collective, after connect where the group has several connections per peer: measures the
// round trips, and stripes each link's large messages over all the connections where its
// round trip is kLongRttSeconds or longer, or everywhere when `everywhere` (--streams N);
// long links also get openings (Group::kOpeningBytes) unless `openings` is false.
void configure_streams(Group& group, bool everywhere, bool openings);

}  // namespace dtrain::comm
