// ElasticReplica (elastic_replica.h): what a replica brings to its round's exchange, and the
// exchange started before the round's end under --sync-delay.
#include <algorithm>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>

#include "dtrain/data/sample_queue.h"
#include "dtrain/elastic/fault_plan.h"
#include "dtrain/parallel/elastic_sync.h"
#include "dtrain/train/elastic_replica.h"

namespace dtrain::train {

using elastic::FaultPhase;

// Every trainer's queue holds the round's assignment and its joiners' by now: a round that
// leaves none of its epoch exchanges every fragment (the epoch's evaluation needs θ whole).
ElasticReplica::Contribution ElasticReplica::contribution(int64_t samples) {
  if (settings_.plan.corrupts(id(), round_)) outer_.perturb(1e-3);
  Contribution c;
  c.due = outer_.due(since_whole_, data::epoch_done(queue_, settings_.epoch_size));
  // Weighed by its samples (elastic_sync.h); the mean is rescaled from the records.
  c.pseudo_gradient =
      outer_.pseudo_gradient().mul_(parallel::contribution_weight(samples, settings_.per_replica));
  c.buffers = outer_.buffers_now();
  c.digest_before = outer_.digest();
  c.samples = samples;
  return c;
}

int64_t ElasticReplica::exchange_starts_at(int64_t steps) const {
  const int64_t delay = outer_.sync_delay();
  // Auto's first choice reads the round's step time, which the round's end sets: it blocks.
  if (delay == 0 || outer_.choice_pending() || data::epoch_done(queue_, settings_.epoch_size))
    return -1;
  return std::max<int64_t>(0, steps - delay);
}

void ElasticReplica::start_exchange(int64_t samples) {
  if (settings_.plan.kills_at(id(), round_, FaultPhase::kExchange)) elastic::die_now(*membership_);
  early_ = std::make_unique<Contribution>(contribution(samples));
  Contribution& c = *early_;
  c.started = true;
  if (group_broken_) return;  // the round's end recovers
  c.running = std::async(std::launch::async, [this, &c, &g = group()] {
    return outer_.exchange(g, c.pseudo_gradient, c.due, c.buffers);
  });
}

ElasticReplica::Contribution& ElasticReplica::own_contribution(std::unique_ptr<Contribution>& early,
                                                               int64_t samples) {
  // Started early on the positions planned: a member trains them all (no mid-round entry).
  if (early && early->samples != samples)
    throw std::logic_error("elastic: an exchange started on " + std::to_string(early->samples) +
                           " samples for a round that trained " + std::to_string(samples));
  if (!early) early = std::make_unique<Contribution>(contribution(samples));
  return *early;
}

parallel::ElasticOuter::Averaged ElasticReplica::exchange(Contribution& c) {
  if (c.running.valid()) return c.running.get();  // beside the round's last steps
  if (!c.started && settings_.plan.kills_at(id(), round_, FaultPhase::kExchange))
    elastic::die_now(*membership_);
  return outer_.exchange(group(), c.pseudo_gradient, c.due, c.buffers);
}

}  // namespace dtrain::train
