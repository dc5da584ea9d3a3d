// Elastic DiLoCo's outer step (docs/elastic.md): the state every replica holds alike (the
// shared parameters θ, the outer momentum), one outer step over whichever replicas are live
// this round, and the state's digest and transfer to replicas that join or differ.
//
// Unlike Diloco (diloco.h), which owns one group for the run, the group is given per call:
// the membership (elastic/) decides who is in a round. An exchange that fails (a CommError:
// a member lost, the group aborted) leaves every part of the state as it was before it, the
// coding residuals included, so it may be run again over another group with the same
// pseudo-gradient. The BatchNorm statistics (floating-point buffers) are averaged exactly at
// every outer step, as Diloco does.
//
// Streaming DiLoCo's fragments (DilocoConfig::fragments F > 1): the flat parameters cut into
// F equal ranges as Diloco cuts them, a round is H / F inner steps and its outer step
// exchanges and steps one fragment, in Diloco's order (due()); the round that ends an epoch
// exchanges every fragment, as Diloco's sync() at an epoch's end, and the order starts again.
// With a sync delay τ the caller starts a round's exchange τ inner steps before the round's
// end and applies it at the end, merged (apply's own_weight): the exchange never crosses a
// boundary, where the members may change.
//
// Not collective by itself: the caller runs exchange() on every member of a group, and the
// state's transfer (pack/unpack) over its own messages.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/compress/codec.h"
#include "dtrain/parallel/coded_feedback.h"
#include "dtrain/parallel/diloco.h"
#include "dtrain/parallel/elastic_sync.h"
#include "dtrain/parallel/flat_parameters.h"

namespace dtrain::comm {
class Group;
}

namespace dtrain::parallel {

class ElasticOuter {
 public:
  // `config`: sync_every, the outer optimizer, the codec and the fragments, no delay (checked
  // by the caller: check_elastic_config). Under --compress-outer auto the codec is chosen at
  // the first exchange (diloco_auto.h: the group's link probed, the members' slowest inner
  // step) and again from the exchanges (choose_again): it is part of the shared state (pack,
  // digest), so replicas that join or re-sync take it with θ.
  ElasticOuter(std::vector<at::Tensor> parameters, std::vector<at::Tensor> buffers,
               const DilocoConfig& config);
  ~ElasticOuter();
  ElasticOuter(const ElasticOuter&) = delete;
  ElasticOuter& operator=(const ElasticOuter&) = delete;

  int64_t values() const { return flat_.size(); }
  // The fragments a round exchanges: `since_whole` rounds after the last that exchanged every
  // one (0: it was the last), the next in Diloco's order (fragment 1 first, fragment 0 after
  // H steps), or every one where `whole` (the round ends an epoch) or F is 1.
  std::vector<size_t> due(int64_t since_whole, bool whole) const;
  int64_t fragments() const { return static_cast<int64_t>(fragments_.size()); }
  // The codec in force ("auto" before auto's choice).
  std::string codec_name() const;
  // Auto's step time: this replica's inner step, the median of its last round's.
  void note_step_s(double step_s) { step_s_ = step_s; }
  // Under auto, before the choice: probes the link over `group` (collective) on a thread of
  // its own, beside the first round's inner steps (the group carries nothing else until the
  // exchange); the next exchange takes its reading, or fails with it. settle_probe() waits
  // for it and drops it: call it before `group` may go (a failure's recovery).
  void start_probe(comm::Group& group);
  void settle_probe();

  // θ minus this replica's parameters now: flat float32 on the CPU. Throws
  // std::runtime_error when it is not finite (the replica diverged).
  at::Tensor pseudo_gradient() const;

  struct Averaged {
    std::vector<size_t> fragments;  // the fragments exchanged (due()'s), in order
    at::Tensor mean;     // the mean pseudo-gradient over the group (theirs; the rest as given)
    at::Tensor buffers;  // the mean buffers, flat (undefined: none, or fragment 0 not due)
    double seconds = 0;
    double measured_s = 0;  // the exchange alone: without auto's first choice (its probe)
    std::string codec;      // the outer codec it ran
    int64_t wire_bytes = 0, fp32_bytes = 0;
  };
  // The mean over `group` (every member calls it with its pseudo-gradient), exact or coded
  // with error feedback; under auto, the first one chooses the codec first (collective over
  // `group`, said on stderr by its rank 0). Throws CommError as the group does; the state,
  // the choice included, is then unchanged.
  // The fragments `due` (due()'s) in turn, each as Diloco exchanges it, `buffers` (this
  // replica's floating-point buffers, flat: buffers_now()) with fragment 0; a failure in any
  // restores every one's residuals. Touches nothing the inner steps use: it may run on a
  // thread of its own beside them (--sync-delay), given a copy of the buffers taken before.
  // Without `due`: every fragment, the buffers as they are now.
  Averaged exchange(comm::Group& group, const at::Tensor& pseudo_gradient,
                    const std::vector<size_t>& due, const at::Tensor& buffers);
  Averaged exchange(comm::Group& group, const at::Tensor& pseudo_gradient);
  at::Tensor buffers_now() const { return flat_buffers(); }
  // θ and the momentum stepped by the mean on the fragments exchanged; this replica's
  // parameters there set to own_weight x themselves + (1 - own_weight) x θ (0: θ; with a sync
  // delay, --merge-alpha keeps a part of the steps taken beside the exchange), and its buffers
  // to the mean ones where they came (every member applies the same: the shared state stays
  // alike).
  void apply(const Averaged& averaged, double own_weight = 0);
  int64_t sync_delay() const { return config_.sync_delay; }
  double merge_alpha() const { return config_.merge_alpha; }

  // A digest of the shared state (θ, momentum, the buffers as the last outer step or transfer
  // set them, auto's choice): two CRC-32Cs, equal on every replica that holds the same bytes.
  // Inner steps leave it as it is (they move the model's own buffers, BatchNorm's statistics,
  // not the shared ones).
  uint64_t digest() const;
  // The shared state as one float32 vector [θ, momentum, buffers, auto's choice (the
  // candidate's index; -1: none yet, or a fixed codec)], and its installation in a replica
  // that joins or differs: parameters and buffers set to it, residuals cleared.
  at::Tensor pack() const;
  void unpack(const at::Tensor& state);
  int64_t packed_values() const;
  // A joiner that enters mid-round trains on θ before the momentum arrives: it unpacks a
  // state whose momentum part is yet zeros, then sets the momentum (checked: its size).
  void unpack_momentum(const at::Tensor& momentum);
  // A joiner that trained on a coarse θ (float_halves.h) meanwhile: `first` is the exact
  // [θ, shared buffers, auto's choice] (pack() without the momentum). θ and the shared
  // buffers become exact, and this replica's parameters and buffers move by as much, keeping
  // what its inner steps did. Throws std::invalid_argument on another size or choice.
  void refine(const at::Tensor& first);
  // Under auto, before the first exchange chose the codec (joiners wait for it).
  bool choice_pending() const { return !candidates_.empty() && choice_ < 0; }
  // Auto again from the exchanges, as Diloco does (diloco_auto.h): each member counts the
  // exchanges of the codec in force over the group it is in (`group`: the group's name; a
  // group of another name starts the count again, and lets the choice go either way once),
  // and reports them in its record (measured()). choose_again(), called by every member of
  // the group with every member's record alike, chooses again where each counted
  // kExchangesToMeasure: the fastest member's exchange time (the last to arrive waited
  // least: the link's), the slowest member's step, the link's latency as any member knew it.
  // After a change the new codec is measured in turn, and only it or a lossier one may
  // follow, until a choice keeps it. Every member makes the same choice: it is shared state.
  // Returns the choice's line for the log, empty where it did not choose.
  void count_exchange(const std::string& group, const Averaged& averaged);
  ExchangeMeasure measured() const;
  std::string choose_again(const std::vector<ExchangeMeasure>& members);
  // The residuals of error feedback start again (a joiner's, a re-synced replica's, a new
  // codec's). A group of another size, or another rank in it (a view change, a redone
  // exchange), carries them into its pieces instead (coded_feedback.h: carry_residuals).
  void reset_residuals(int group_size);
  // Tests (fault plans): shifts θ by `delta`, so this replica's digest differs.
  void perturb(double delta);
  // How many times this replica's parameters were set from the shared state (apply, unpack,
  // refine, perturb): a replica of several ranks shares them again when it changed.
  uint64_t writes() const { return writes_; }

 private:
  struct Fragment {
    int64_t begin = 0, size = 0;  // range of the flat parameters
    FeedbackResiduals feedback;
    int rank = -1;  // this replica's rank in the group `feedback` was kept for
  };
  at::Tensor flat_buffers() const;
  // One fragment's mean into out.mean's range (`buffers`' into out.buffers, where defined),
  // its bytes counted.
  void exchange_fragment(comm::Group& group, size_t index, at::Tensor buffers, Averaged& out);
  void choose_codec(comm::Group& group);
  void set_choice(int64_t choice);
  void count_afresh();  // auto's count of exchanges (count_exchange) starts again

  FlatParameters flat_;
  std::vector<at::Tensor> buffers_;
  DilocoConfig config_;
  std::unique_ptr<compress::Codec> codec_;  // null: exact
  at::Tensor anchor_, momentum_;            // flat float32, CPU
  at::Tensor shared_buffers_;               // flat: the buffers the last outer step or transfer set
  std::vector<Fragment> fragments_;
  std::future<std::pair<double, double>> probe_;  // start_probe()'s: {rate, latency}
  std::vector<compress::CodecSpec> candidates_;   // auto's, in preference order (else empty)
  int64_t choice_ = -1;                           // auto's: an index of candidates_, -1 none yet
  double step_s_ = 0;
  // Auto's measurement of the exchanges (count_exchange, choose_again).
  std::string measured_group_;
  bool measuring_ = true;
  ExchangeMeasure measured_;
  uint64_t writes_ = 0;
};

// Internal (elastic_outer.cpp, elastic_auto.cpp): the tags of the coded exchange (phases 0
// and 1) and of auto's link probe (2 and 3).
int elastic_outer_tag(int phase);

// Throws std::invalid_argument naming what elastic DiLoCo does not take: fragments that do
// not divide --sync-every, a sync delay of a whole round or more.
void check_elastic_config(const DilocoConfig& config);

}  // namespace dtrain::parallel
