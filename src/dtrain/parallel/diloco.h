// DiLoCo (Douillard et al., "DiLoCo: Distributed Low-Communication Training of Language
// Models", 2023): each replica (one rank) takes `sync_every` (H) steps of its own inner
// optimizer on its own data; then the replicas average their pseudo-gradients (the shared
// parameters at the round's start minus their current ones) and an outer optimizer
// (SGD with Nesterov momentum) moves the shared parameters by that average. Every replica
// then continues from the new shared parameters; its inner optimizer state stays its own.
//
// The outer average goes through dtrain's all-reduce: exact with codec `none`, else coded
// with the codec and error feedback (comm/coded_allreduce.h), each replica's residual
// carried into its next round. Floating-point buffers (BatchNorm statistics) are averaged
// exactly at every outer step; the others (counters) stay as they are.
//
// Streaming DiLoCo (Douillard et al., "Streaming DiLoCo with overlapping communication",
// 2025): with `fragments` F > 1 the flat parameter vector is cut into F equal ranges, and
// fragment f has its outer step every H steps at its own offset f H / F (the first round of
// fragment f > 0 is that offset long), so the link carries 1/F of the volume at a time.
// With `sync_delay` tau > 0 a fragment's exchange runs on a background thread beside the
// next tau inner steps and is applied after exactly tau of them (whatever the link's speed:
// runs stay deterministic); the replica's own progress on the fragment in those steps is
// kept in part: parameters = alpha local + (1 - alpha) shared. tau may reach H (a fragment's
// exchange lands before its next starts): beyond the gap between two fragments' offsets
// several exchanges are in flight at once, ceil(tau / floor(H / F)) at most, each on a thread
// and message tags of its own, so that a link's latency longer than H/F steps still hides
// (the paper's tau up to H).
//
// Replicas of several ranks (a DDP group each, `replica`): the pseudo-gradient is the same on
// every rank of a replica, so rank i of each replica averages only block i of it with rank
// i of the other replicas (over `group`, the replicas' i-th ranks), and the replica's ranks
// then all-gather the blocks over their own fast links: the slow links between replicas
// carry each value once. The gather runs on the training thread (between inner steps,
// where DDP does not use the replica's group), never on the worker.
//
// Collective over the group: every rank must construct it and call after_inner_step(),
// sync() and settle() at the same points. While an exchange is in flight the group is
// this object's: call settle() before any other collective on it (checkpoints do). So it is
// under --compress-outer auto from the first inner step until auto chooses: the link probe
// runs on a thread of its own beside those steps and, where it outlasts them (seconds on a
// 100 ms link), beside the first exchanges, which then go with auto's lossiest candidate.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/compress/codec.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/parallel/auto_codec.h"
#include "dtrain/parallel/background_worker.h"
#include "dtrain/parallel/coded_feedback.h"
#include "dtrain/parallel/diloco_auto.h"
#include "dtrain/parallel/flat_parameters.h"

namespace dtrain::comm {
class Group;
}

namespace dtrain::parallel {

class ReadinessVote;

struct DilocoConfig {
  int64_t sync_every = 50;        // H: inner steps per outer step
  double outer_lr = 0.7;          // the paper's defaults
  double outer_momentum = 0.9;    // Nesterov
  compress::CodecSpec codec;      // of the outer all-reduce; none: exact
  int64_t fragments = 1;          // F: ranges of the parameters synchronized at staggered steps
  int64_t sync_delay = 0;         // tau: inner steps an exchange runs beside before it is applied
  double merge_alpha = 0.5;       // with tau > 0: weight of the replica's own parameters
  int64_t ranks_per_replica = 1;  // K > 1: each replica a DDP group (train/diloco_engine.cpp)
  // --compress-outer auto: `codec` chosen from these at the first exchange (diloco_auto.h).
  std::optional<AutoCompress> auto_codec;
};

// Fragment f of `count` over `values` flat parameters: {begin, size}, equal ranges (sizes
// differ by one at most). Diloco and ElasticOuter cut alike, so their schedules agree.
struct FragmentRange {
  int64_t begin = 0, size = 0;
};
inline FragmentRange fragment_range(int64_t values, int64_t count, int64_t f) {
  const int64_t begin = values * f / count;
  return {begin, values * (f + 1) / count - begin};
}

struct DilocoStats {
  int64_t outer_steps = 0;  // fragment exchanges applied (a whole-model step counts F)
  double sync_s = 0;        // time training waited for outer steps (exchange and update)
  double exchange_s = 0;    // time the exchanges took, in the background or not
  double hidden_s = 0;      // of exchange_s, the part inner steps ran beside
  int64_t wire_bytes = 0;   // bytes this rank sent in outer exchanges
  int64_t fp32_bytes = 0;   // what an exact fp32 ring all-reduce would have sent
  int64_t inner_steps = 0;
  std::string codec;  // the outer exchange's, as it stands ("auto" until chosen)
};

class Diloco {
 public:
  // Starts every replica from rank 0's parameters and buffers (broadcast over `group`).
  // `group`: one rank of each replica; `replica`: this replica's ranks (null: one rank).
  Diloco(comm::Group& group, std::vector<at::Tensor> parameters, std::vector<at::Tensor> buffers,
         DilocoConfig config, comm::Group* replica = nullptr);
  ~Diloco();
  Diloco(const Diloco&) = delete;
  Diloco& operator=(const Diloco&) = delete;

  // After every inner optimizer step: applies the exchange that is due, starts (or, without
  // a delay, runs) each fragment's exchange on its schedule. True when it started one.
  bool after_inner_step();
  // Every fragment's outer step now, unless no inner step has run since its last one; an
  // exchange in flight is applied first. Afterwards every replica holds the shared
  // parameters, and the group is free (auto's probe has ended). False when there was nothing
  // to do.
  bool sync();
  // Waits for the exchanges in flight, if any, and keeps their results for the steps they
  // are due at: the group is free for other collectives, and state() holds everything.
  void settle();
  // The next inner step's index in its epoch of `steps`. An outer step that falls due fewer
  // than H/2 steps before the epoch's end, or at its last step, waits for the sync() that
  // follows it: no round is shorter than H/2 but in an epoch that is, since a short round's
  // outer step would push the momentum again for little work (docs/diloco.md).
  // --compress-outer auto counts the epoch's last step, which exchanges every fragment at
  // once, into its choice. Unset, every outer step comes on its schedule.
  void set_epoch_position(int64_t step, int64_t steps) {
    epoch_step_ = step;
    epoch_steps_ = steps;
  }
  // Seconds training waited for outer steps since the last take_stats().
  double sync_seconds() const { return stats_.sync_s; }
  DilocoStats take_stats();
  const DilocoConfig& config() const { return config_; }
  // The most exchanges a config keeps in flight at once (0 without --sync-delay).
  static int64_t exchanges_in_flight(const DilocoConfig& config);
  static constexpr int64_t kMostInFlight = 16;

  // Checkpoints: the shared parameters, the outer momentum, the error-feedback residuals,
  // each fragment's inner steps since its last outer step and a settled exchange's result,
  // by name. Settles first.
  std::map<std::string, at::Tensor> state();
  // Throws std::runtime_error saying why `saved` does not fit this run; changes nothing.
  void check_state(const std::map<std::string, at::Tensor>& saved) const;
  void restore_state(const std::map<std::string, at::Tensor>& saved);

 private:
  struct Fragment {
    int64_t begin = 0, size = 0;  // range of the flat parameters
    int64_t first_countdown = 0;  // steps to its first outer step: H, or its offset
    int64_t countdown = 0;        // inner steps until its next exchange starts
    int64_t since = 0;            // inner steps since its last outer step
    FeedbackResiduals feedback;
  };
  // What an exchange brings back.
  struct Averaged {
    at::Tensor pseudo_gradient;  // the replicas' mean
    at::Tensor buffers;          // their mean floating-point buffers, flat (fragment 0 only)
    double seconds = 0;
    int64_t wire_bytes = 0, fp32_bytes = 0;
  };
  struct InFlight {
    size_t fragment = 0;
    int64_t steps_left = 0;  // inner steps until it is applied
    std::future<Averaged> running;
    std::optional<Averaged> settled;
    double waited_s = 0;  // training's time blocked on it so far
  };

  // Phases 0 and 1: the coded exchange's two; 2 and 3: auto's link probe; 4: auto's vote;
  // 5 and 6: the exact exchange's (all_reduce's exchange takes a tag and the next).
  // `slot`: the exchanges in flight at once (phases 0, 1, 5 and 6; the others slot 0).
  static int outer_tag(int phase, int64_t slot = 0);
  static constexpr int64_t kVoteLag = 2;
  at::Tensor flat_buffers() const;
  // check_state's part for the exchanges in flight; `fail` throws.
  void check_pending(const std::map<std::string, at::Tensor>& saved,
                     const std::function<void(const std::string&)>& fail) const;
  // The fragment averaged over `group_` (with a replica of several ranks: this rank's block).
  Averaged exchange(size_t fragment, const at::Tensor& pseudo_gradient, const at::Tensor& buffers,
                    const std::shared_ptr<const compress::Codec>& codec, int64_t slot);
  // Every block of the replica's ranks into the whole fragment of `size` values.
  void gather_blocks(Averaged& averaged, int64_t size);
  void apply(size_t fragment, const Averaged& averaged, double own_weight);
  // --compress-outer auto: starts the link probe beside the inner steps (from the first one:
  // the group is free from then until the first exchange).
  void start_probe();
  // --compress-outer auto before its choice, at each exchange: chooses once a vote
  // (readiness_vote.h) found the probe's reading in on every rank, else exchanges with the
  // lossiest candidate meanwhile (the probe outlasts the first H steps only where the link
  // is slow or long; waiting for it cost a 50 Mbit/s, 100 ms link's run 2 s). Each vote
  // after the first is counted kVoteLag exchanges after it was posted: its answers take two
  // one-way delays (Gloo sends once the receiver's notice is in), and every exchange between
  // takes one at least, so they are in by then (one exchange later, streaming's counts
  // waited about a delay each on a 100 ms link).
  void decide_codec();
  // Auto's choice in force: `spec` codes the exchanges from the next on; a switch to the
  // exact exchange drops every fragment's error-feedback residuals, once the exchanges in
  // flight that use them have ended.
  void switch_codec(const compress::CodecSpec& spec);
  // Auto's candidate that codes smallest: the exchanges' codec before the choice.
  compress::CodecSpec lossiest_candidate() const;
  // The inner steps' own time so far (without the exchanges); where none was timed (an
  // epoch of one step), the time since the start over the steps.
  double timed_step_s() const;
  // --compress-outer auto: takes the probe's reading (in on every rank) and picks the codec
  // for the slowest rank's steps of `step_s`.
  void choose_codec(double step_s);
  // --compress-outer auto, kExchangesToMeasure exchanges later: picks again with the rate
  // those exchanges found (diloco_auto.h, rate_from_exchanges); after a change, again from
  // the new codec's exchanges, among it and lossier ones, until a choice keeps the codec.
  void choose_codec_again();
  // Logs a choice on the replicas' first rank.
  void log_choice(const std::string& line) const;
  // Starts the fragment's exchange: on the worker, or here and applied at once.
  void launch(size_t fragment, bool background);
  // Waits for an exchange in flight and keeps its result; settle_exchanges() for every one
  // (settle() without the probe).
  void settle_exchange(InFlight& e);
  void settle_exchanges();
  // Applies the exchange in flight now, the replica's own parameters weighted `own_weight`.
  void land(double own_weight);

  comm::Group& group_;
  comm::Group* replica_;  // null, or this replica's ranks
  std::vector<at::Tensor> parameters_, buffers_;
  FlatParameters flat_;
  DilocoConfig config_;
  std::shared_ptr<const compress::Codec> codec_;  // null: exact; an exchange holds its own
  bool codec_pending_ = false;                    // auto, not chosen yet
  // auto, chosen: the setting it chose from, and the exchanges since (their count, the bytes
  // this rank sent, their seconds); null once a choice from exchanges kept the codec.
  std::optional<OuterSetting> measuring_;
  int64_t measured_exchanges_ = 0;
  double measured_bytes_ = 0, measured_s_ = 0;
  size_t auto_floor_ = 0;  // after a change from exchanges: the least lossy candidate left
  bool chosen_from_exchanges_ = false;
  int64_t epoch_step_ = -1, epoch_steps_ = 0;  // set_epoch_position
  metrics::Clock::time_point started_;         // for auto: the steps' time where none was timed
  InnerStepTimes step_times_;                  // for auto: the steps' own, while it chooses
  at::Tensor anchor_;                          // the shared parameters, flat float32
  at::Tensor momentum_;                        // the outer optimizer's
  std::vector<Fragment> fragments_;
  std::deque<InFlight> in_flight_;  // in the order they started, and land
  DilocoStats stats_;
  std::future<std::pair<double, double>> link_reading_;  // auto's probe: {rate, latency}
  std::unique_ptr<ReadinessVote> vote_;                  // auto, until it chooses
  int64_t exchanges_since_vote_ = 0;                     // auto: since the vote out was posted
  bool provisional_ = false;                             // auto: exchanging before the choice
  int64_t next_slot_ = 0;  // the next background exchange's slot (and worker)
  // With --sync-delay, one per slot; last: their jobs use the rest.
  std::vector<std::unique_ptr<BackgroundWorker>> workers_;
};

}  // namespace dtrain::parallel
