// A link's own rate, measured between two idle ranks: what crosses the wire per second,
// not counting latency, the peer's reply or the peer's compute; one direction at a time, or
// both at once (Duplex, below).
//
// The initiator sends a 128 KiB and a 512 KiB message, each answered by 8 bytes, then asks
// for the same two sizes back; the difference of the two times of one direction is 384 KiB
// on the wire, free of latency and of a token bucket's initial burst (the best of rounds
// repeated until they took 50 ms, at most 8: one on a slow link, several on a fast one).
// Where the first round moved 512 KiB in under 16 ms, the rounds start over with sizes 8x
// (1 and 4 MiB): a fast link's token bucket holds more than the small message (a 1 Gbit/s
// lab link's 2 ms burst is 250 KB). 4x read the same on an idle machine, but 721 Mbit/s
// once while other tests loaded both cores (8x: 843 once): a busy CPU reads links low.
// The latency is half an 8-byte round trip. Both ranks call it with the same tags; only the
// initiator's result is filled in.
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

LinkProbe probe_link(Group& group, int peer, bool initiator, int ping_tag, int data_tag,
                     Duplex duplex = Duplex::kOneWayAtATime);

// The slowest directed link between rank 0 and each other rank, probed with
// Duplex::kBothWaysAtOnce (as an all-reduce uses its links). Collective: every rank calls
// it; the result is rank 0's (the other ranks get the defaults).
struct SlowestLink {
  int src = 0, dst = 0;
  double rate_bytes_per_s = 1e30;  // the slowest direction's
  double latency_s = 0;            // that link's, one way
  double longest_latency_s = 0;    // the longest of every link's
};
SlowestLink probe_slowest_from_rank0(Group& group, int ping_tag, int data_tag);

// One way's latency alone: half the best of three 8-byte round trips (both ranks call it).
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
