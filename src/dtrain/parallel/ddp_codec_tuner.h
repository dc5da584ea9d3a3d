// `--compress-grad auto` for DDP: the gradient codec re-chosen at the second synchronized
// step of every epoch (the first may carry warm-up; collective: every rank calls
// calibrate() at the same step). Until the first decision the exchange uses the last
// (most compressive) candidate.
//
// Measured: every link between rank 0 and another rank, both directions (an all-reduce is
// as slow as its slowest link, so that rate is used): from the calibrating step's own
// exchange (its bytes over the time its receives were busy, each way) where that kept every
// direction busy for 0.1 s or more (slow links: no probe bytes added to the epoch), else by
// the probe (comm/link_probe.h), both ways at once as the all-reduce uses the link (half
// the time of one way after the other). The exchange's rate is an effective one: the gaps between
// the ranks' messages (their skew, the coding between the two phases) count, and it reads
// 2-12 % under the probe on the lab's 10 and 20 Mbit/s links. On rank 0, this
// step's gradients coded with every candidate (exact packet bytes, encode and decode time);
// this step's compute (forward + backward). Per rank and step, a codec other than none sends
// 2(p-1)/p of the packet bytes (reduce-scatter, then all-gather) and decodes 2(p-1)/p of the
// values; none takes the exact path (ring traffic 2(p-1)/p of the fp32 bytes, no coding).
// The prediction is auto_codec.h's with one resource per rank and the exchange as one link
// (compute + coding + wire: the coding competes with backward for the cores here, so no
// overlap is credited). Rank 0 decides; every rank gets the codec. When another candidate
// is predicted close, the next synchronized steps run it off against the choice
// (auto_runoff.h): every rank alternates alike, rank 0's step times decide.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "dtrain/comm/group.h"
#include "dtrain/metrics/rows.h"
#include "dtrain/parallel/auto_codec.h"
#include "dtrain/parallel/auto_runoff.h"

namespace dtrain::parallel {

class DdpCodecTuner {
 public:
  DdpCodecTuner(comm::Group& group, const AutoCompress& options);

  // `gradients`: this step's, flattened; `messages`: point-to-point messages per step.
  void calibrate(const at::Tensor& gradients, double compute_s, double messages);
  // The codec the next synchronized step must use: a runoff's side, else the choice (before
  // the first calibration: the most compressive candidate).
  const compress::CodecSpec& codec_for_next_step() const;
  // After every synchronized step; collective on the step that ends a runoff.
  void record_step(double seconds, int64_t samples);
  // At the end of an epoch: an unfinished runoff is dropped, the choice stays.
  void end_epoch();

  // The last decision (metrics::key::kAutoLinks rows: the slowest link), empty before it.
  std::vector<metrics::Row> rows() const;
  const std::vector<compress::CodecSpec>& candidates() const { return candidates_; }

 private:
  comm::Group& group_;
  std::vector<compress::CodecSpec> candidates_;
  double runoff_window_;
  std::vector<LinkChoice> choice_;  // rank 0
  size_t chosen_;
  std::optional<Runoff> runoff_;
  // Per peer: its receive counters at the last record_step(), and what the step moved.
  std::vector<comm::LinkCounters> counted_, last_step_;
};

}  // namespace dtrain::parallel
