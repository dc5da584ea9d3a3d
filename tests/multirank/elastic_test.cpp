// Elastic DiLoCo's collective parts over real Gloo/TCP between rank threads: aborting a
// group's pending waits, the records and state transfers of a boundary, and the outer step
// over a membership that shrinks, against a single-process reference; an exchange that
// fails leaves the state as it was.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "../support/models.h"
#include "../support/ranks.h"
#include "dtrain/comm/error.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/world.h"
#include "dtrain/parallel/elastic_outer.h"
#include "dtrain/parallel/elastic_sync.h"
#include "dtrain/parallel/exact_mean.h"
#include "dtrain/parallel/float_halves.h"

namespace dtrain::parallel {
namespace {

using namespace std::chrono_literals;

TEST(GroupAbortTest, AnAbortEndsAPendingReceiveWithItsReasonAndLaterPostsFail) {
  testing::run_ranks(2, [](comm::Group& g) {
    g.make_abortable();
    if (g.rank() == 1) {  // never sends: only the abort can end rank 0's wait
      g.barrier();
      return;
    }
    std::thread aborter([&g] {
      std::this_thread::sleep_for(100ms);
      g.abort("replica 1 was lost (a test)");
    });
    at::Tensor t = at::zeros({4});
    comm::Request r = g.irecv(t, 1, 7);
    try {
      r.wait();
      ADD_FAILURE() << "the receive completed";
    } catch (const comm::CommError& e) {
      EXPECT_NE(std::string(e.what()).find("replica 1 was lost (a test)"), std::string::npos)
          << e.what();
    }
    aborter.join();
    EXPECT_TRUE(g.aborted());
    EXPECT_THROW(g.isend(t, 1, 8), comm::CommError);
    g.barrier();
  });
}

TEST(ElasticSyncTest, RecordsReachEveryMemberAndTheMajorityDigestIsFound) {
  testing::run_ranks(3, [](comm::Group& g) {
    // Auto's measurements travel exactly (float64), and the 64-bit digest whole.
    const ExchangeMeasure measured{2,     1.5 + g.rank(), 1e6 + 0.4, 0.0123456789,
                                   2.5e6, 0.005,          g.rank()};
    const uint64_t digest = g.rank() == 2 ? 0x9900000000000099u : 0xf200000000000042u;
    const Record mine{5, 10 + g.rank(), digest, 100 * g.rank(), measured};
    const std::vector<Record> all = exchange_records(g, mine);
    ASSERT_EQ(all.size(), 3u);
    for (int r = 0; r < 3; ++r) {
      const Record& rec = all[static_cast<size_t>(r)];
      EXPECT_EQ(rec.round, 5);
      EXPECT_EQ(rec.proposal, 10 + r);
      EXPECT_EQ(rec.samples, 100 * r);
      EXPECT_EQ(rec.measured.exchanges, 2);
      EXPECT_EQ(rec.measured.exchange_s, 1.5 + r);
      EXPECT_EQ(rec.measured.bytes, 1e6 + 0.4);
      EXPECT_EQ(rec.measured.step_s, 0.0123456789);
      EXPECT_EQ(rec.measured.rate_bytes_per_s, 2.5e6);
      EXPECT_EQ(rec.measured.latency_s, 0.005);
      EXPECT_EQ(rec.measured.floor, r);
    }
    const Majority m = majority_digest(all);
    EXPECT_EQ(m.digest, 0xf200000000000042u);
    EXPECT_EQ(m.differ, std::vector<int>{2});
  });
}

// A member whose record names another round is an error, not a record taken for this one.
TEST(ElasticSyncTest, ARecordOfAnotherRoundIsAnError) {
  testing::run_ranks(3, [](comm::Group& g) {
    try {
      exchange_records(g, Record{g.rank() == 1 ? 9 : 8, 0, 0, 0, {}});
      ADD_FAILURE() << "records of rounds 8 and 9 were taken alike";
    } catch (const comm::CommError& e) {
      EXPECT_NE(std::string(e.what()).find("of round"), std::string::npos) << e.what();
    }
  });
}

TEST(ElasticSyncTest, AJoinerAssemblesTheStateFromEveryDonor) {
  const at::Tensor truth = at::arange(0, 1001, at::kFloat);
  testing::run_ranks(4, [&](comm::Group& g) {
    const bool joiner = g.rank() >= 2;
    at::Tensor state = joiner ? at::zeros({1001}) : truth.clone();
    std::vector<int64_t> progress = joiner ? std::vector<int64_t>{} : std::vector<int64_t>{7, 8, 9};
    uint64_t digest = joiner ? 0 : 1234;
    transfer_state(g, {0, 1}, {2, 3}, state, progress, digest);
    EXPECT_TRUE(at::equal(state, truth));
    EXPECT_EQ(progress, (std::vector<int64_t>{7, 8, 9}));
    EXPECT_EQ(digest, 1234u);
  });
}

DilocoConfig outer_config(const std::string& codec = "none") {
  DilocoConfig c;
  c.sync_every = 3;
  c.outer_lr = 0.7;
  c.outer_momentum = 0.9;
  c.codec = compress::parse_codec(codec);
  return c;
}

// Replica r's parameters after its round k of inner steps: the anchor moved by its own
// deterministic offset (what its training would do).
at::Tensor trained(const at::Tensor& anchor, int replica, int round) {
  at::Generator gen = at::detail::createCPUGenerator(static_cast<uint64_t>(100 * round + replica));
  return anchor - 0.01 * at::randn(anchor.sizes(), gen);
}

// Three replicas take one outer step together; replica 2 is lost; the two left take two more.
// Every rank's shared state must equal the reference's: outer Nesterov on the mean of the
// live replicas' pseudo-gradients, computed here in double.
TEST(ElasticOuterTest, TheOuterStepFollowsTheLiveMembersAsTheReferenceDoes) {
  torch::nn::Sequential model = testing::tiny_mlp(3, 2);
  const at::Tensor start = torch::nn::utils::parameters_to_vector(model->parameters()).detach();
  at::Tensor anchor = start.to(at::kDouble), momentum = at::zeros_like(anchor);
  const auto reference_step = [&](const std::vector<int>& live, int round) {
    at::Tensor g = at::zeros_like(anchor);
    for (const int r : live)
      g += (anchor - trained(anchor.to(at::kFloat), r, round).to(at::kDouble));
    g /= static_cast<double>(live.size());
    momentum = 0.9 * momentum + g;
    anchor = anchor - 0.7 * (g + 0.9 * momentum);
  };
  reference_step({0, 1, 2}, 0);
  reference_step({0, 1}, 1);
  reference_step({0, 1}, 2);
  std::mutex mutex;
  std::map<int, at::Tensor> finals;
  std::map<int, uint64_t> digests;
  std::vector<torch::nn::Sequential> models;  // made here: seeding is process-wide
  for (int r = 0; r < 3; ++r)
    models.push_back(testing::tiny_mlp(3, 2));
  testing::run_ranks(3, [&](comm::Group& g) {
    torch::nn::Sequential& mine = models[static_cast<size_t>(g.rank())];
    ElasticOuter outer(mine->parameters(), mine->buffers(), outer_config());
    const auto train_round = [&](int round) {
      const at::Tensor now = torch::nn::utils::parameters_to_vector(mine->parameters()).detach();
      torch::NoGradGuard no_grad;
      torch::nn::utils::vector_to_parameters(trained(now, g.rank(), round), mine->parameters());
    };
    train_round(0);
    outer.apply(outer.exchange(g, outer.pseudo_gradient()));
    if (g.rank() == 2) return;  // lost
    auto pair = comm::connect_subgroup(g, {0, 1}, "after-2-was-lost");
    for (int round = 1; round <= 2; ++round) {
      train_round(round);
      outer.apply(outer.exchange(*pair, outer.pseudo_gradient()));
    }
    const std::lock_guard<std::mutex> lock(mutex);
    finals[g.rank()] = outer.pack().narrow(0, 0, outer.values()).clone();
    digests[g.rank()] = outer.digest();
  });
  ASSERT_EQ(finals.size(), 2u);
  EXPECT_TRUE(at::equal(finals[0], finals[1]));
  EXPECT_EQ(digests[0], digests[1]);
  EXPECT_TRUE(at::allclose(finals[0].to(at::kDouble), anchor, 1e-5, 1e-6))
      << (finals[0].to(at::kDouble) - anchor).abs().max().item<double>();
}

// A short contribution (a mid-round joiner's few steps) weighs by its samples: each member
// scales its pseudo-gradient by its weight, the exchange's mean times the records' factor
// must equal the samples-weighted mean computed in double. Full shares keep the plain mean
// bit for bit (both factors exactly 1).
TEST(ElasticOuterTest, TheOuterMeanWeighsEachContributionByItsSamples) {
  EXPECT_EQ(contribution_weight(320, 320), 1.0);
  EXPECT_EQ(reweigh_factor({{0, 0, 0, 320, {}}, {0, 0, 0, 320, {}}}, 320), 1.0);
  EXPECT_THROW(contribution_weight(1, 0), std::invalid_argument);
  const std::vector<int64_t> samples{320, 320, 64};
  std::vector<at::Tensor> gradients;
  at::Tensor reference = at::zeros({1000}, at::kDouble);
  for (int r = 0; r < 3; ++r) {
    gradients.push_back(at::randn({1000}, at::TensorOptions().dtype(at::kFloat)));
    reference += gradients.back().to(at::kDouble) * static_cast<double>(samples[r]);
  }
  reference /= 704.0;
  std::mutex mutex;
  std::map<int, at::Tensor> means;
  testing::run_ranks(3, [&](comm::Group& g) {
    const auto r = static_cast<size_t>(g.rank());
    at::Tensor mean = gradients[r] * contribution_weight(samples[r], 320);
    exact_mean(g, mean);
    const std::vector<Record> records = exchange_records(g, {0, 0, 0, samples[r], {}});
    mean *= reweigh_factor(records, 320);
    const std::lock_guard<std::mutex> lock(mutex);
    means[g.rank()] = mean;
  });
  ASSERT_EQ(means.size(), 3u);
  for (const auto& [rank, mean] : means)
    EXPECT_TRUE(at::allclose(mean.to(at::kDouble), reference, 1e-5, 1e-6)) << "rank " << rank;
}

// Inner steps move each replica's own BatchNorm statistics, not the shared state: two
// replicas that hold the same θ, momentum and last mean buffers have one digest and pack
// alike whatever their inner steps did to the model's buffers (a digest of those would
// re-sync every member of a BatchNorm model at every outer step).
TEST(ElasticOuterTest, InnerStepsBuffersAreNotTheSharedState) {
  const auto bn_model = [] {
    torch::manual_seed(5);
    return torch::nn::Sequential(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4));
  };
  torch::nn::Sequential a = bn_model(), b = bn_model();
  ElasticOuter outer_a(a->parameters(), a->buffers(), outer_config());
  ElasticOuter outer_b(b->parameters(), b->buffers(), outer_config());
  ASSERT_EQ(outer_a.digest(), outer_b.digest());
  a->train();
  a->forward(torch::randn({8, 3}));  // running statistics move in a's model only
  EXPECT_EQ(outer_a.digest(), outer_b.digest());
  EXPECT_TRUE(at::equal(outer_a.pack(), outer_b.pack()));
  // The state received by a joiner sets the shared buffers and the model's alike.
  torch::nn::Sequential c = bn_model();
  c->train();
  c->forward(torch::randn({8, 3}) * 5);
  ElasticOuter joiner(c->parameters(), c->buffers(), outer_config());
  joiner.unpack(outer_a.pack());
  EXPECT_EQ(joiner.digest(), outer_b.digest());
  const at::Tensor mean = c->named_buffers()["1.running_mean"];
  EXPECT_TRUE(at::equal(mean, b->named_buffers()["1.running_mean"]));
  // A changed θ still shows.
  outer_a.perturb(1e-3);
  EXPECT_NE(outer_a.digest(), outer_b.digest());
}

// A mid-round joiner trains on the coarse θ (the upper halves) until the exact one arrives:
// refine() makes its shared state the donor's bit for bit, and keeps what its inner steps
// did, so its pseudo-gradient is what it trained, as if it had started from the exact θ.
TEST(ElasticOuterTest, AJoinerThatTrainedOnTheCoarseStateIsRefinedToTheDonorsExactly) {
  const auto bn_model = [](int seed) {
    torch::manual_seed(seed);
    return torch::nn::Sequential(torch::nn::Linear(3, 5), torch::nn::BatchNorm1d(5));
  };
  torch::nn::Sequential donor_model = bn_model(1), joiner_model = bn_model(2);
  donor_model->train();
  donor_model->forward(torch::randn({8, 3}));  // shared buffers not the initial ones
  ElasticOuter donor(donor_model->parameters(), donor_model->buffers(), outer_config());
  donor.unpack_momentum(torch::randn({donor.values()}));  // a momentum not zero
  const at::Tensor state = donor.pack();
  const int64_t n = donor.values();
  const at::Tensor first =
      at::cat({state.narrow(0, 0, n), state.narrow(0, 2 * n, state.numel() - 2 * n)});
  const at::Tensor coarse = join_halves(upper_halves(first), {}, first.numel());
  ASSERT_FALSE(at::equal(coarse, first));

  ElasticOuter joiner(joiner_model->parameters(), joiner_model->buffers(), outer_config());
  joiner.unpack(
      at::cat({coarse.narrow(0, 0, n), at::zeros({n}), coarse.narrow(0, n, coarse.numel() - n)}));
  std::vector<at::Tensor> moved;  // the joiner's inner steps
  {
    const at::NoGradGuard no_grad;
    for (auto& p : joiner_model->parameters()) {
      moved.push_back(torch::randn_like(p) * 1e-2);
      p.add_(moved.back());
    }
  }
  joiner_model->train();
  joiner_model->forward(torch::randn({8, 3}));
  const at::Tensor mean_before = joiner_model->named_buffers()["1.running_mean"].clone();
  const at::Tensor shared_mean_coarse = coarse.narrow(0, n, 5);

  joiner.refine(join_halves(upper_halves(first), lower_halves(first), first.numel()));
  joiner.unpack_momentum(state.narrow(0, n, n));
  EXPECT_EQ(joiner.digest(), donor.digest());
  EXPECT_TRUE(at::equal(joiner.pack(), state));
  std::vector<at::Tensor> flat_moved;
  for (const auto& m : moved)
    flat_moved.push_back(m.reshape({-1}));
  EXPECT_TRUE(at::allclose(joiner.pseudo_gradient(), -at::cat(flat_moved), 1e-5, 1e-6));
  // The model's buffers keep their inner steps' movement too, over the exact shared ones.
  EXPECT_TRUE(at::allclose(joiner_model->named_buffers()["1.running_mean"],
                           mean_before + (first.narrow(0, n, 5) - shared_mean_coarse), 1e-6, 1e-7));
  // Another size, or another auto choice, is refused.
  EXPECT_THROW(joiner.refine(first.narrow(0, 0, first.numel() - 1)), std::invalid_argument);
  at::Tensor other_choice = first.clone();
  other_choice[first.numel() - 1] = 2.0f;
  EXPECT_THROW(joiner.refine(other_choice), std::invalid_argument);
}

// A coded exchange that fails half way (the peer's connections close) must leave the
// residuals of error feedback as they were: the redo then gives what a first try gives.
TEST(ElasticOuterTest, AFailedExchangeLeavesTheStateAsItWas) {
  std::vector<torch::nn::Sequential> models{testing::tiny_mlp(3, 2), testing::tiny_mlp(3, 2)};
  std::vector<std::unique_ptr<ElasticOuter>> outers, fresh;
  for (auto& m : models) {
    outers.push_back(
        std::make_unique<ElasticOuter>(m->parameters(), m->buffers(), outer_config("sortquant:4")));
  }
  std::vector<at::Tensor> pseudo(2);
  for (int r = 0; r < 2; ++r) {
    torch::NoGradGuard no_grad;
    const at::Tensor now = torch::nn::utils::parameters_to_vector(models[r]->parameters());
    torch::nn::utils::vector_to_parameters(trained(now.detach(), r, 0), models[r]->parameters());
    pseudo[static_cast<size_t>(r)] = outers[static_cast<size_t>(r)]->pseudo_gradient();
  }
  std::atomic<bool> failed{false};
  testing::run_ranks(2, [&](comm::Group& g) {
    if (g.rank() == 1) return;  // leaves: its connections close under rank 0's exchange
    try {
      outers[0]->exchange(g, pseudo[0]);
    } catch (const comm::CommError&) {
      failed = true;
    }
  });
  ASSERT_TRUE(failed);
  std::vector<at::Tensor> redone(2), first(2);
  testing::run_ranks(2, [&](comm::Group& g) {
    redone[static_cast<size_t>(g.rank())] = outers[static_cast<size_t>(g.rank())]
                                                ->exchange(g, pseudo[static_cast<size_t>(g.rank())])
                                                .mean;
  });
  for (auto& m : models)
    fresh.push_back(
        std::make_unique<ElasticOuter>(m->parameters(), m->buffers(), outer_config("sortquant:4")));
  testing::run_ranks(2, [&](comm::Group& g) {
    first[static_cast<size_t>(g.rank())] = fresh[static_cast<size_t>(g.rank())]
                                               ->exchange(g, pseudo[static_cast<size_t>(g.rank())])
                                               .mean;
  });
  for (int r = 0; r < 2; ++r)
    EXPECT_TRUE(at::equal(redone[static_cast<size_t>(r)], first[static_cast<size_t>(r)])) << r;
}

// Under auto the first exchange chooses the codec (collectively); a failed one leaves no
// choice behind, and the choice travels with the packed state and shows in its digest.
TEST(ElasticOuterTest, AutosChoiceIsUndoneByAFailedExchangeAndTravelsWithTheState) {
  DilocoConfig config = outer_config();
  AutoCompress options;
  options.candidates = {compress::parse_codec("none"), compress::parse_codec("sortquant:4")};
  options.min_bits = 4;
  config.auto_codec = options;
  std::vector<torch::nn::Sequential> models{testing::tiny_mlp(3, 2), testing::tiny_mlp(3, 2)};
  std::vector<std::unique_ptr<ElasticOuter>> outers;
  for (auto& m : models)
    outers.push_back(std::make_unique<ElasticOuter>(m->parameters(), m->buffers(), config));
  EXPECT_EQ(outers[0]->codec_name(), "auto");
  const uint64_t unchosen = outers[0]->digest();
  std::atomic<bool> failed{false};
  testing::run_ranks(2, [&](comm::Group& g) {
    if (g.rank() == 1) return;  // leaves: rank 0's probe fails
    try {
      outers[0]->exchange(g, outers[0]->pseudo_gradient());
    } catch (const comm::CommError&) {
      failed = true;
    }
  });
  ASSERT_TRUE(failed);
  EXPECT_EQ(outers[0]->codec_name(), "auto");
  EXPECT_EQ(outers[0]->digest(), unchosen);
  testing::run_ranks(2, [&](comm::Group& g) {
    auto& outer = *outers[static_cast<size_t>(g.rank())];
    outer.note_step_s(g.rank() == 0 ? 0.01 : 0.02);
    outer.start_probe(g);  // beside the inner steps: the exchange takes its reading
    outer.exchange(g, outer.pseudo_gradient());
  });
  const std::string chosen = outers[0]->codec_name();
  EXPECT_NE(chosen, "auto");
  EXPECT_EQ(outers[1]->codec_name(), chosen);
  EXPECT_EQ(outers[0]->digest(), outers[1]->digest());
  EXPECT_NE(outers[0]->digest(), unchosen);
  // A joiner takes the choice with the state; one of a fixed codec refuses it.
  auto joiner_model = testing::tiny_mlp(3, 2);
  ElasticOuter joiner(joiner_model->parameters(), joiner_model->buffers(), config);
  joiner.unpack(outers[0]->pack());
  EXPECT_EQ(joiner.codec_name(), chosen);
  EXPECT_EQ(joiner.digest(), outers[0]->digest());
  ElasticOuter fixed(joiner_model->parameters(), joiner_model->buffers(), outer_config());
  const at::Tensor state = outers[0]->pack();
  EXPECT_THROW(fixed.unpack(state), std::invalid_argument);
  at::Tensor bad = state.clone();
  bad[bad.numel() - 1] = 7.0f;  // no such candidate
  EXPECT_THROW(joiner.unpack(bad), std::invalid_argument);
}

// Auto again from the exchanges: every member decides from every member's measurements (the
// round's records) and so decides alike; it waits for kExchangesToMeasure exchanges of each,
// steps only to lossier codecs within one group until a choice keeps the codec, and a new
// group measures again and may go either way.
// Two members of an auto run (H = 50, min 4 bits, `candidates`) over `parameters` (one
// tensor each), exact chosen as a first choice would, each with inner steps of 10 ms: a
// budget of 25 ms an exchange.
std::vector<std::unique_ptr<ElasticOuter>> auto_members(
    const std::vector<compress::CodecSpec>& candidates, std::vector<at::Tensor>& parameters) {
  DilocoConfig config = outer_config();
  config.sync_every = 50;
  AutoCompress options;
  options.candidates = candidates;
  options.min_bits = 4;
  config.auto_codec = options;
  std::vector<std::unique_ptr<ElasticOuter>> members;
  for (auto& p : parameters)
    members.push_back(std::make_unique<ElasticOuter>(std::vector<at::Tensor>{p},
                                                     std::vector<at::Tensor>{}, config));
  at::Tensor state = members[0]->pack();
  state[state.numel() - 1] = 0.0f;  // exact chosen
  for (auto& m : members) {
    m->unpack(state);
    m->note_step_s(0.01);
  }
  return members;
}

// The founders' probe reading (rate, latency) reaches every member through the records of a
// choice made again: a joiner that chose with a founder carries it on, so a group of joiners
// only, the founders gone, still reads the link's latency instead of 0.
TEST(ElasticOuterTest, AJoinerLearnsTheFoundersLinkReadingFromTheRecords) {
  const int64_t n = 1 << 12;
  std::vector<at::Tensor> parameters{at::zeros({n}), at::zeros({n})};
  const auto members = auto_members(
      {compress::parse_codec("none"), compress::parse_codec("sortquant:4")}, parameters);
  for (auto& m : members) {
    ElasticOuter::Averaged a;
    a.measured_s = 0.002;
    a.wire_bytes = 4 * n;
    for (int i = 0; i < 2; ++i)
      m->count_exchange("g", a);
  }
  EXPECT_EQ(members[1]->measured().latency_s, 0.0);  // a joiner: never probed
  std::vector<ExchangeMeasure> records{members[0]->measured(), members[1]->measured()};
  records[0].rate_bytes_per_s = 2.5e6;  // the founder's record: its probe's reading
  records[0].latency_s = 0.005;
  for (auto& m : members)
    m->choose_again(records);
  for (auto& m : members) {
    EXPECT_EQ(m->measured().rate_bytes_per_s, 2.5e6);
    EXPECT_EQ(m->measured().latency_s, 0.005);
  }
}

TEST(ElasticOuterTest, AutoChoosesAgainFromEveryMembersExchangesAlike) {
  const std::vector<compress::CodecSpec> candidates = {compress::parse_codec("none"),
                                                       compress::parse_codec("sortquant:8"),
                                                       compress::parse_codec("sortquant:4")};
  const std::string lossiest = compress::to_string(candidates.back());
  const int64_t n = 1 << 16;
  std::vector<at::Tensor> parameters{at::zeros({n}), at::zeros({n})};
  const auto members = auto_members(candidates, parameters);
  const auto exchanges = [&](const std::string& group, double seconds, int count) {
    for (auto& m : members) {
      ElasticOuter::Averaged a;
      a.measured_s = seconds;
      a.wire_bytes = m->codec_name() == "none" ? 4 * n : n / 2;
      for (int i = 0; i < count; ++i)
        m->count_exchange(group, a);
    }
  };
  const auto choose_again = [&] {
    std::vector<ExchangeMeasure> all;
    for (auto& m : members)
      all.push_back(m->measured());
    std::vector<std::string> lines;
    for (auto& m : members)
      lines.push_back(m->choose_again(all));
    EXPECT_EQ(members[0]->codec_name(), members[1]->codec_name());
    EXPECT_EQ(members[0]->digest(), members[1]->digest());
    EXPECT_EQ(lines[0], lines[1]);
    return lines[0];
  };
  exchanges("g1", 1.0, 1);  // 262 kB in a second: far over the budget
  EXPECT_EQ(choose_again(), "");
  EXPECT_EQ(members[0]->codec_name(), "none");
  exchanges("g1", 1.0, 1);
  EXPECT_NE(choose_again().find("again from 2 exchanges of none"), std::string::npos);
  EXPECT_EQ(members[0]->codec_name(), lossiest);
  // Fast exchanges of the new codec: within the group, no way back to a less lossy one; the
  // choice kept, measuring ends there.
  exchanges("g1", 0.001, 2);
  EXPECT_NE(choose_again(), "");
  EXPECT_EQ(members[0]->codec_name(), lossiest);
  exchanges("g1", 0.001, 2);
  EXPECT_EQ(choose_again(), "");
  // A new group (a view change) measures again: its fast link takes the exact exchange back.
  exchanges("g2", 0.001, 2);
  EXPECT_NE(choose_again(), "");
  EXPECT_EQ(members[0]->codec_name(), "none");
  // A member that has not measured enough holds the choice for every member.
  exchanges("g3", 1.0, 2);
  ElasticOuter::Averaged one;
  one.measured_s = 1.0;
  members[1]->count_exchange("g4", one);
  EXPECT_EQ(choose_again(), "");
  EXPECT_EQ(members[0]->codec_name(), "none");
}

}  // namespace
}  // namespace dtrain::parallel
