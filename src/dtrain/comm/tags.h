// One registry of point-to-point message tags. Gloo pairs a receive with a send by (peer,
// tag), so two users of one Group that could be in flight at the same time must never
// share a tag. Each user owns a space; inside it, a TagLayout packs named fields into the
// low 24 bits and throws, naming the field and its limit, when a value does not fit.
//
//   tag = space << 24 | fields packed from the most significant (first) to the last
//
// Spaces: collectives (all_reduce's algorithms, broadcast, reduce_scatter / all_gather,
// SyncBatchNorm's reductions), the pipeline (activations, gradients, labels, commands,
// results), DDP's compressed exchange, DiLoCo's outer exchange, elastic DiLoCo's records and
// state transfers, reports (a rank's summary to rank 0), benchmarks, and the point-to-point
// messages of torch.distributed's users (torch_backend/). Space values stay below
// 2^7, so every tag is a positive int.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace dtrain::comm {

enum class TagSpace : int {
  kCollective = 1,
  kPipeline = 2,
  kDdp = 3,
  kReport = 4,
  kBenchmark = 5,
  kTuning = 6,   // link probes and codec choices of --compress-grad auto
  kOuter = 7,    // DiLoCo's coded outer exchange
  kElastic = 8,  // elastic DiLoCo: records beside the outer exchange, state transfers
  kTorch = 9,    // torch.distributed's send / recv through dtrain's backend: the user's tag
  kWatch = 10,   // each group's standing receive from every peer, never sent to (peer_watch.h)
};

struct TagField {
  const char* name;
  int bits;
};

class TagLayout {
 public:
  // Throws std::invalid_argument when the fields need more than 24 bits.
  TagLayout(TagSpace space, std::initializer_list<TagField> fields);

  // The tag for these field values (one per field, in order). Throws std::out_of_range
  // naming the field when a value is negative or does not fit its bits.
  int make(std::initializer_list<int64_t> values) const;

  // One more than the largest value field `index` can hold.
  int64_t limit(size_t index) const;

 private:
  TagSpace space_;
  std::vector<TagField> fields_;
};

// Tags of the collectives in comm: which collective (the top 8 of the 24 bits, so two
// different ones in flight on one Group, e.g. DDP's bucket all-reduce and SyncBatchNorm's,
// never meet), then a 16-bit phase, 0 in collective_tag(): an algorithm whose second phase
// needs a tag of its own takes tag + 1 (all_reduce's exchange).
enum class CollectiveChannel : int {
  kAllReduce = 0,
  kBroadcast = 1,
  kScatterGather = 2,
  kSyncBatchNorm = 3,
  kRooted = 4,    // gather and scatter (rooted.cpp)
  kAllToAll = 5,  // all_to_all (all_to_all.cpp)
};
int collective_tag(CollectiveChannel channel);

// The tags of a collective's openings (Group::isend_opening): its payload's and the trailer
// that follows it, taken from the top two bits of the collective tag's phase field, so they
// never meet the collective's other messages. DiLoCo's outer exchange (TagSpace::kOuter)
// and elastic DiLoCo's exchange and records (TagSpace::kElastic) have openings too: on a
// long link each of their messages would otherwise wait a one-way delay for the receiver's
// notice. Throws
// std::invalid_argument for a tag of another space or whose phase already uses those bits.
struct OpeningTags {
  int payload = 0;
  int trailer = 0;
};
OpeningTags opening_tags(int collective_tag);
// Whether opening_tags(tag) has tags to give.
bool has_opening_tags(int tag);

// The tag of rank reports (a rank's measurements sent to rank 0 at the end of a run).
int report_tag();

// The tag of trace messages (clock synchronisation with rank 0, and each rank's events).
int trace_tag();

// The tag of connect()'s round-trip pings between pairs of ranks (link_probe.h).
int connect_probe_tag();

// For error messages: "pipeline message (tag 0x2001003)".
std::string describe_tag(int tag);

}  // namespace dtrain::comm
